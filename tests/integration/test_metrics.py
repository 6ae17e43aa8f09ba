"""The validator's and a projection's /metrics during a real run: the rocksdb validator on the session's Spark and
the DB projection on the session's broker, each served on a free port and scraped twice; the figures must move."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.cli.project import runner_config
from app.local.kafka_broker import free_port
from app.metrics.projections import ProjectionCollector
from app.metrics.server import serve_metrics
from app.read_models import open_writer
from app.settings import Settings
from app.validator.job import build_query
from app.validator.metrics import ValidatorCollector
from commands import Command, CreateObject, UpdateObject
from projections.db import DbProjection
from projections.runner import Runner
from tests.integration.validator_oracle import send_commands

pytestmark = pytest.mark.integration

T0 = datetime(2025, 1, 1, tzinfo=UTC)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def trickle(settings: Settings, stop: threading.Event) -> None:
    """Send a few commands twice a second until ``stop``: creates, an update each, a repeated create (rejected).

    Load keeps coming, as in production: a shard server writes its figures at most once a second and only while
    it serves requests, so a validator that goes idle may leave its last batch out of them until the next one.
    """
    i = 0
    while not stop.is_set():
        cmds: list[Command] = []
        for _ in range(10):
            oid, at = f"obj-{i}", T0 + timedelta(seconds=i)
            cmds += [CreateObject(f"{oid}-c", oid, "alice", at, document="{}"),
                     UpdateObject(f"{oid}-u", oid, "alice", at, patch='{"a": 1}'),
                     CreateObject(f"{oid}-c2", oid, "alice", at, document="{}")]
            i += 1
        send_commands(settings, cmds)
        stop.wait(0.5)


#: What moves while commands trickle in; the test waits for each to move between two scrapes, then asserts it did.
VALIDATOR_MOVING = ("arbiter_shard_records_total", "arbiter_shard_batches_total", "arbiter_shard_state_rows",
                    "arbiter_shard_changelog_bytes_total", "arbiter_validator_committed_offset",
                    "arbiter_validator_last_batch_id")
PROJECTION_MOVING = ("arbiter_projection_records_total", "arbiter_projection_batches_total",
                     "arbiter_projection_applied_total", "arbiter_projection_batch_seconds_total")


def wait_for(what: str, ok: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_validator_and_projection_metrics_move_during_a_run(spark, settings: Settings) -> None:  # noqa: ANN001
    settings = settings.model_copy(update={"trigger_interval": "200 milliseconds"})
    assert settings.state_backend == "rocksdb"
    query = build_query(spark, settings)
    validator = serve_metrics("validator", "127.0.0.1", free_port(), [ValidatorCollector(settings)])
    projection = DbProjection(open_writer(settings.model_copy(update={"projection_sync_writes": False})))
    runner = Runner(runner_config(settings, "db", (settings.topic_events,), assign_all=True), projection)
    db = serve_metrics("db projection", "127.0.0.1", free_port(), [ProjectionCollector(runner)])
    consumer = threading.Thread(target=runner.run, name="db-projection", daemon=True)
    consumer.start()
    assert validator is not None and db is not None
    stop = threading.Event()
    producer = threading.Thread(target=trickle, args=(settings, stop), name="trickle", daemon=True)
    producer.start()
    try:
        wait_for("the shards' figures", lambda: total(scrape(validator.port), "arbiter_shard_records_total") > 0)
        wait_for("the progress file", lambda: total(scrape(validator.port), "arbiter_validator_committed_offset") > 0)
        wait_for("events applied", lambda: total(scrape(db.port), "arbiter_projection_applied_total") > 0)
        first = (scrape(validator.port), scrape(db.port))
        scrapes = [first, first]

        def moved() -> bool:  # every counter the assertions below compare has moved past the first scrape
            scrapes[1] = (scrape(validator.port), scrape(db.port))
            (v1, p1), (v2, p2) = scrapes
            return all(total(v2, n) > total(v1, n) for n in VALIDATOR_MOVING) \
                and all(total(v2, "arbiter_shard_decisions_total", outcome=o) > total(
                    v1, "arbiter_shard_decisions_total", outcome=o) for o in ("event", "rejection")) \
                and all(total(p2, n) > total(p1, n) for n in PROJECTION_MOVING)

        wait_for("every counter to move past the first scrape", moved)
    finally:
        stop.set()
        producer.join(30)
        query.stop()
        runner.request_stop()
        consumer.join(30)
        validator.close()
        db.close()

    (v1, p1), (v2, p2) = scrapes
    for name in VALIDATOR_MOVING[:-1]:
        assert total(v2, name) > total(v1, name) > 0, (name, total(v1, name), total(v2, name))
    assert total(v2, "arbiter_validator_last_batch_id") > total(v1, "arbiter_validator_last_batch_id") >= 0
    for outcome in ("event", "rejection"):
        assert total(v2, "arbiter_shard_decisions_total", outcome=outcome) > total(
            v1, "arbiter_shard_decisions_total", outcome=outcome) > 0
    assert total(v2, "arbiter_shard_server_up") >= 1
    assert 0 < total(v2, "arbiter_shard_server_block_cache_usage_bytes") <= total(
        v2, "arbiter_shard_server_block_cache_limit_bytes") * total(v2, "arbiter_shard_server_up")
    assert total(v2, "arbiter_validator_last_batch_duration_seconds", phase="triggerExecution") > 0
    assert {dict(ls)["partition"] for (n, ls) in v2 if n == "arbiter_shard_state_rows"} == {"0", "1", "2", "3"}
    assert {dict(ls)["partition"] for (n, ls) in v2 if n == "arbiter_validator_lag"} == {"0", "1", "2", "3"}
    assert total(v2, "arbiter_validator_last_batch_timestamp_seconds") > time.time() - 600

    for name in PROJECTION_MOVING:
        assert total(p2, name) > total(p1, name) > 0, (name, total(p1, name), total(p2, name))
    assert total(p2, "arbiter_projection_gaps_total") == 0 and total(p2, "arbiter_projection_undecodable_total") == 0
    lag = {dict(ls)["partition"]: v for (n, ls), v in p2.items() if n == "arbiter_projection_lag"}
    assert set(lag) == {"0", "1", "2", "3"} and all(v >= 0 for v in lag.values()), lag
