"""Helpers shared by the API's integration tests (no tests here): the real pipeline behind an in-process client
(validator query on the session's Spark, DB projection into the read model the API reads), and topic readers."""

from __future__ import annotations

import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, Consumer, Message, TopicPartition
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.callers.auth import OPERATE, USER_SCOPES
from app.api.callers.identity import dev_token
from app.api.main import create_app
from app.read_models import audit_root, open_writer, read_model_root
from app.settings import Settings
from app.topics import ensure_topics
from app.validator.job import build_query
from projections.audit import AuditProjection
from projections.db import DbProjection
from projections.db.store import current_generation
from projections.runner import Projection, Runner, RunnerConfig
from schemas import codec


@dataclass(frozen=True)
class RunningArbiter:
    """The shared stack as one test sees it: its settings (topics, var dir), the in-process API, and a tag unique
    to the test."""

    settings: Settings
    client: Any  # fastapi.testclient.TestClient, lifespan started
    tag: str


def module_settings_for(base: Settings, tmp: pytest.TempPathFactory, name: str, **update: Any) -> Settings:  # noqa: ANN401
    """Settings naming a test module's own topics (created) and var directory, with ``update`` applied."""
    tag = uuid.uuid4().hex[:10]
    s = base.model_copy(update={
        "topic_commands": f"commands-{tag}", "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}",
        "var_dir": tmp.mktemp(name), **update})
    ensure_topics(s)
    return s


@contextmanager
def served(app: Any, **config: Any) -> Iterator[str]:  # noqa: ANN401 - an ASGI app, uvicorn.Config options
    """Serve ``app`` under uvicorn (lifespan on) on a free loopback port in a thread; yield its URL; stop it.

    ``config`` overrides ``uvicorn.Config``'s options (``log_level`` "warning" by default)."""
    import uvicorn

    from app.local.kafka_broker import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, **{"host": "127.0.0.1", "port": port, "log_level": "warning",
                                                   "lifespan": "on", **config}))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@contextmanager
def live_pipeline(spark: Any, settings: Settings) -> Iterator[None]:  # noqa: ANN401 - a SparkSession
    """Run the real validator (``settings.state_backend``'s streaming query on ``spark``) and the real DB projection
    (on a thread, into the configured read model, ``settings.read_model``, where ``create_app`` opens its reader)
    until the block ends.

    What the API answers after this is what ``arbiter run`` would answer: nothing in between is played by a test.
    """
    with validator_running(spark, settings), db_projection_running(settings):
        yield


@contextmanager
def validator_running(spark: Any, settings: Settings) -> Iterator[None]:  # noqa: ANN401 - a SparkSession
    """Run the real validator's streaming query on ``spark`` until the block ends (no projection)."""
    query = build_query(spark, settings.model_copy(update={"trigger_interval": "100 milliseconds"}))
    try:
        yield
    finally:
        query.stop()


@contextmanager
def db_projection_running(settings: Settings) -> Iterator[None]:
    """Run the real DB projection on a thread into the configured read model until the block ends."""
    s = settings.model_copy(update={"projection_sync_writes": False})
    with projection_running(s, DbProjection(open_writer(s)), (s.topic_events,)):
        if s.read_model == "rocksdb":
            assert current_generation(read_model_root(s)) is not None, "the DB projection did not create the read model"
        yield


@contextmanager
def audit_projection_running(settings: Settings) -> Iterator[None]:
    """Run the real audit projection on a thread into ``audit_root(settings)`` until the block ends."""
    projection = AuditProjection(audit_root(settings), sync=False)
    with projection_running(settings, projection, (settings.topic_events, settings.topic_rejections)):
        yield


@contextmanager
def projection_running(s: Settings, projection: Projection, topics: tuple[str, ...]) -> Iterator[None]:
    """Run ``projection`` over ``topics`` on a thread (its runner assigned every partition) until the block ends."""
    runner = Runner(RunnerConfig(bootstrap=s.kafka_bootstrap, topics=topics,
                                 group_id=f"t-{projection.name}-{s.topic_events}", assign_all=True,
                                 lag_interval_s=3600), projection)
    thread = threading.Thread(target=runner.run, name=f"{projection.name}-projection", daemon=True)
    thread.start()
    try:
        yield
    finally:
        runner.request_stop()
        thread.join(30)
        assert not thread.is_alive(), f"the {projection.name} projection did not stop"


def read_until(client: TestClient, path: str, headers: dict[str, str], etag: str, timeout: float = 30.0) -> Any:  # noqa: ANN401
    """GET ``path`` until the read model serves ``etag`` (the projection follows the validator by a batch or two)."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(path, headers=headers)
        if r.headers.get("etag") == etag or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def decided(r: Any, status: int, etag: str) -> Any:  # noqa: ANN401 - an httpx Response
    """Assert a write under ``Prefer: wait`` was answered by the validator with ``status`` and ``etag``."""
    assert (r.status_code, r.headers.get("etag")) == (status, etag), r.text
    return r


def is_problem(r: Any, status: int, code: str | None = None) -> dict[str, Any]:  # noqa: ANN401 - an httpx Response
    """Assert ``r`` is an RFC 9457 problem with ``status`` (and ``code``); return its body."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["type"].startswith("urn:arbiter:problem:") and body["detail"]
    if code is not None:
        assert body["code"] == code, body
    return body


def produced_commands(settings: Settings, n: int, timeout: float = 10.0) -> list[Any]:
    """The commands the API produced so far (at least ``n`` awaited), decoded."""
    return [codec.decode_command(m.value()) for m in consume_all(settings, settings.topic_commands, n, timeout)]


def cli_api_env(settings: Settings, port: int) -> dict[str, str]:
    """The environment of a real ``arbiter api`` process on ``port`` for ``settings``' broker, topics and var dir:
    development with the placeholder secret, on loopback, and no Prometheus directory of the caller's."""
    env = {**os.environ, "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "ARBITER_TOPIC_COMMANDS": settings.topic_commands, "ARBITER_TOPIC_EVENTS": settings.topic_events,
           "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections, "ARBITER_PARTITIONS": str(settings.partitions),
           "ARBITER_VAR_DIR": str(settings.path(settings.var_dir)), "ARBITER_API_PORT": str(port),
           "ARBITER_ENVIRONMENT": "development", "PYTHONUNBUFFERED": "1"}
    env.pop("ARBITER_AUTH_SECRET", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def token(settings: Settings, principal: str, scopes: tuple[str, ...] | None = None,
          groups: tuple[str, ...] = ()) -> str:
    """A development JWT: a user's scopes by default, and ``arbiter:operate`` too for the tests' "operator"."""
    if scopes is None:
        scopes = USER_SCOPES + ((OPERATE,) if principal == "operator" else ())
    return dev_token(settings, principal, scopes, 3600, groups)


def auth(settings: Settings, principal: str = "alice", scopes: tuple[str, ...] | None = None,
         groups: tuple[str, ...] = ()) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(settings, principal, scopes, groups)}"}


@contextmanager
def api_client(settings: Settings) -> Iterator[TestClient]:
    """The app in-process, lifespan started: producer and outcomes consumer on the real broker, and the DB
    projection's read model under ``settings.var_dir`` opened as ``arbiter api`` opens it."""
    with TestClient(create_app(settings), raise_server_exceptions=True) as client:
        yield client


def consume_all(settings: Settings, topic: str, n: int, timeout: float = 20.0, window: float = 0.5) -> list[Message]:
    """Read ``topic`` from the beginning until ``n`` records arrived (or ``timeout`` passed), then ``window`` more.

    The ``window`` is what callers lean on to say "nothing (more) was produced", so it only starts once the
    consumer is proven assigned every partition and positioned at the high watermarks read after the wait:
    a window spent still joining or still fetching old records would prove nothing.
    """
    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"t-{topic}-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    out: list[Message] = []

    def take(wait: float) -> None:
        for m in c.consume(num_messages=1000, timeout=wait):
            assert m.error() is None, m.error()
            out.append(m)

    try:
        partitions = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        assert sorted(tp.partition for tp in c.assignment()) == partitions, "the consumer is not assigned every partition"
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            take(0.3)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
        deadline = time.monotonic() + 20
        while True:
            read_to = {p: max([m.offset() + 1 for m in out if m.partition() == p], default=ends[p][0]) for p in partitions}
            behind = {p: (read_to[p], hi) for p, (_, hi) in ends.items() if read_to[p] < hi}
            if not behind:
                break
            assert time.monotonic() < deadline, f"not at the end offsets of {topic} (read to, high watermark): {behind}"
            take(0.2)
        positions = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in partitions])}
        assert all(positions[p] in (hi, OFFSET_INVALID) and (positions[p] == hi or hi == lo)
                   for p, (lo, hi) in ends.items()), f"positions {positions} are not the end offsets {ends}"
        # Positioned at the end: more than n records now would be a bug the caller should see.
        stop = time.monotonic() + window
        while time.monotonic() < stop:
            take(max(0.01, stop - time.monotonic()))
    finally:
        c.close()
    return out
