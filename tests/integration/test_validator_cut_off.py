"""A validator cut off from Kafka longer than its lease session: it keeps its query stopped and starts again in the
same process once the broker is back, instead of exiting with LEASE_LOST as if another driver owned the checkpoint.

Runs on ``own_broker`` (tests/integration/conftest.py: a broker apart from the session's, started once for the
tests that stop it) so stopping it does not disturb the session broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.local.kafka_broker import LocalBroker
from app.settings import Settings
from app.topics import ensure_lease_topic, ensure_topics
from commands import Command, CreateObject, UpdateObject
from tests.integration.validator_oracle import (
    ROOT,
    assert_restart_decided_the_rest,
    output_count,
    send_commands,
    validator_env,
)

pytestmark = pytest.mark.integration

T0 = datetime(2025, 6, 1, tzinfo=UTC)


def _commands(start: int, n: int, objects: int = 40) -> list[Command]:
    return [CreateObject(f"c{i}", f"o{i % objects}", "alice", T0 + timedelta(seconds=i), document='{"a": 1}')
            if i < objects else
            UpdateObject(f"u{i}", f"o{i % objects}", "alice", T0 + timedelta(seconds=i), patch=f'{{"n": {i}}}')
            for i in range(start, start + n)]


def _wait(what: str, until, job: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not until():
        assert job.poll() is None, f"the validator exited with {job.returncode} waiting for {what}: " \
                                   f"{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f} s: {log.read_text()[-4000:]}"
        time.sleep(0.2)


def test_a_validator_cut_off_from_kafka_takes_its_lease_back_when_the_broker_returns(
        own_broker: LocalBroker, base_settings: Settings, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    s = base_settings.model_copy(update={
        "kafka_bootstrap": own_broker.bootstrap, "partitions": 2, "topic_commands": f"commands-{tag}",
        "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}", "var_dir": tmp_path / "var",
        "topic_validator_leases": f"leases-{tag}", "state_backend": "rocksdb", "max_offsets_per_trigger": 100})
    ensure_topics(s)
    ensure_lease_topic(s)
    first, second = _commands(0, 200), _commands(200, 200)
    send_commands(s, first)
    log = tmp_path / "validator.log"
    env = {**validator_env(s), "ARBITER_TOPIC_VALIDATOR_LEASES": s.topic_validator_leases,
           "ARBITER_LEASE_SESSION_TIMEOUT_MS": "2000"}
    with log.open("wb") as out:
        job = subprocess.Popen([sys.executable, "-m", "app.validator"], env=env, stdout=out,  # noqa: S603
                               stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    try:
        # 300 s: this wait covers the job's Spark start, which took over 120 s on a machine at load 60
        _wait("first outputs", lambda: output_count(s) >= len(first), job, log, timeout=300)
        own_broker.stop()
        _wait("lost lease", lambda: "lost its lease without another member taking it (cut off" in log.read_text(),
              job, log)
        own_broker.start(Settings())
        _wait("lease taken back", lambda: "took its lease back" in log.read_text(), job, log)
        send_commands(s, second)
        _wait("outputs after the outage", lambda: output_count(s) >= len(first) + len(second), job, log)
        assert job.poll() is None
        text = log.read_text()
        assert "LEASE_LOST" not in text and "another driver may own" not in text, text[-4000:]
    finally:
        if job.poll() is None:
            os.kill(job.pid, signal.SIGTERM)
            try:
                job.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
    assert_restart_decided_the_rest(s, first + second)
