"""The checkpoint lease fences a second validator driver on any host (issue 18), against the session's real broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.settings import Settings
from app.topics import ensure_lease_topic
from app.validator.lease import CheckpointLeased, LeaseConfig, LeaseJoinFailed, ValidatorLease
from commands import Command, CreateObject, UpdateObject
from tests.integration.validator_oracle import (
    ROOT,
    expected_outputs,
    output_count,
    send_commands,
    topic_outputs,
    validator_env,
)

pytestmark = pytest.mark.integration

HOLDER = """
import json, sys, time
from app.validator.lease import CheckpointLeased, LeaseConfig, LeaseJoinFailed, ValidatorLease
deadline = time.monotonic() + 30
while True:  # a previous holder's member may keep the lease until its session expires
    try:
        ValidatorLease(LeaseConfig(**json.loads(sys.argv[1]))).acquire()
        break
    except CheckpointLeased:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def lease_settings(settings: Settings) -> Settings:
    s = settings.model_copy(update={"topic_validator_leases": f"leases-{uuid.uuid4().hex[:8]}"})
    ensure_lease_topic(s)
    return s


def _config(s: Settings, checkpoint: str, name: str, session_ms: int = 2000, **kw: float) -> LeaseConfig:
    return LeaseConfig(bootstrap=s.kafka_bootstrap, topic=s.topic_validator_leases, checkpoint=checkpoint,
                       instance_id=f"instance-{name}", client_id=f"client-{name}", session_timeout_ms=session_ms,
                       max_poll_interval_ms=int(kw.get("max_poll_ms", 30_000)),
                       acquire_timeout_s=kw.get("acquire_s", 2 * session_ms / 1000))


def _acquire_within(config: LeaseConfig, timeout_s: float) -> tuple[ValidatorLease, float]:
    """Try ``acquire`` (refused at once while another holds it) until it succeeds; return the lease and the wait."""
    t0 = time.monotonic()
    while True:
        lease = ValidatorLease(config)
        try:
            lease.acquire()
            return lease, time.monotonic() - t0
        except CheckpointLeased:
            assert time.monotonic() - t0 < timeout_s, f"{config.client_id} did not get the lease in {timeout_s} s"
            time.sleep(0.1)


def _holder(config: LeaseConfig) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps(config.__dict__)], cwd=ROOT,  # noqa: S603
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held", "the holder process did not take the lease"
    return proc


def test_a_second_lease_is_refused_naming_the_holder_and_gets_it_once_released(lease_settings: Settings) -> None:
    ckpt = f"s3://bucket/{uuid.uuid4().hex}"
    t0 = time.monotonic()
    a = ValidatorLease(_config(lease_settings, ckpt, "a"))
    a.acquire()
    acquired = time.monotonic() - t0
    assert a.held
    b = ValidatorLease(_config(lease_settings, ckpt, "b", acquire_s=60))
    with pytest.raises(CheckpointLeased, match="client-a") as refused:
        b.acquire()
    assert refused.value.code == "CHECKPOINT_LEASED"
    # Refused by the check before joining ("holds"), not after waiting out the acquire timeout ("kept for 60 s").
    assert "client-a (from" in str(refused.value) and "holds its lease" in str(refused.value), str(refused.value)
    a.release()
    b, handover = _acquire_within(_config(lease_settings, ckpt, "b"), 2 * 2 + 2)
    try:
        assert b.held and not a.held
        print(f"acquire {acquired:.2f} s, hand-over after release {handover:.2f} s")
    finally:
        b.release()


def test_a_killed_holder_is_replaced_at_once_by_its_own_instance_and_after_the_session_by_another(
        lease_settings: Settings) -> None:
    # A 60 s session: the same instance gets the lease back long before it could expire (static membership).
    ckpt, long_ms = f"hdfs://nn/{uuid.uuid4().hex}", 60_000
    first = _holder(_config(lease_settings, ckpt, "a", session_ms=long_ms))
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    again, same = _acquire_within(_config(lease_settings, ckpt, "a", session_ms=long_ms), 30)
    again.release()
    # Another instance waits for a crashed holder's session to expire, then takes the lease.
    ckpt, session_s = f"hdfs://nn/{uuid.uuid4().hex}", 3.0
    other = _holder(_config(lease_settings, ckpt, "c", session_ms=int(session_s * 1000)))
    os.killpg(other.pid, signal.SIGKILL)
    other.wait(10)
    taker, takeover = _acquire_within(_config(lease_settings, ckpt, "b", session_ms=int(session_s * 1000)),
                                      session_s + 5)
    try:
        assert takeover > session_s / 2, f"another instance took a crashed holder's lease in {takeover:.2f} s"
        print(f"same-instance restart {same:.2f} s (60 s session), other-instance takeover {takeover:.2f} s "
              f"(session {session_s} s)")
    finally:
        taker.release()


def test_a_holder_that_stops_polling_is_told_it_lost_the_lease_and_another_takes_it(lease_settings: Settings) -> None:
    ckpt = f"s3://bucket/{uuid.uuid4().hex}"
    lost: list[str] = []
    a = ValidatorLease(_config(lease_settings, ckpt, "a", max_poll_ms=3000), on_lost=lost.append)
    a.acquire()
    with a._poll_lock:  # the poll thread stalls: no poll within max.poll.interval.ms
        b, waited = _acquire_within(_config(lease_settings, ckpt, "b"), 15)
    try:
        deadline = time.monotonic() + 5
        while not lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lost, "the stalled holder was never told it lost the lease"
        assert not a.held and b.held
        print(f"stalled holder replaced after {waited:.2f} s: {lost[0]}")
    finally:
        a.release()
        b.release()


T0 = datetime(2025, 6, 1, tzinfo=UTC)


def _commands(start: int, n: int, objects: int = 50) -> list[Command]:
    out: list[Command] = []
    for i in range(start, start + n):
        oid, at = f"o{i % objects}", T0 + timedelta(seconds=i)
        out.append(CreateObject(f"c{i}", oid, "alice", at, document='{"a": 1}') if i < objects
                   else UpdateObject(f"u{i}", oid, "alice" if i % 3 else "bob", at, patch=f'{{"n": {i}}}'))
    return out


def _start(s: Settings, log: Path, checkpoint: Path, extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = {**validator_env(s), "ARBITER_CHECKPOINT_LOCATION": str(checkpoint),
           "ARBITER_TOPIC_VALIDATOR_LEASES": s.topic_validator_leases, **(extra or {})}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "app.validator"], env=env, stdout=out,  # noqa: S603
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)


def _wait_for_outputs(s: Settings, driver: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the driver has written its first outcome; fail with its log if it exits or takes over 300 s (the
    wait covers its Spark start, which took over 120 s on a machine at load 60)."""
    deadline = time.monotonic() + 300
    while output_count(s) == 0:
        assert driver.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the driver wrote nothing in 300 s"
        time.sleep(0.2)


def test_a_second_driver_with_its_own_local_directory_is_refused_by_the_lease_and_the_first_decides_everything(
        lease_settings: Settings, tmp_path: Path) -> None:
    s = lease_settings.model_copy(update={"state_backend": "rocksdb", "max_offsets_per_trigger": 200})
    shared = tmp_path / "shared-checkpoint"  # the same checkpoint URI for both; each driver its own var (rocks) dir
    a_settings = s.model_copy(update={"var_dir": tmp_path / "host-a"})
    b_settings = s.model_copy(update={"var_dir": tmp_path / "host-b"})
    first, second = _commands(0, 400), _commands(400, 400)
    send_commands(s, first)
    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    a = _start(a_settings, a_log, shared)
    try:
        _wait_for_outputs(s, a, a_log)
        b = _start(b_settings, b_log, shared)
        try:
            code = b.wait(60)
        finally:
            if b.poll() is None:
                os.killpg(b.pid, signal.SIGKILL)
                b.wait(10)
        out = b_log.read_text()
        assert code != 0, out[-3000:]
        assert "CHECKPOINT_LEASED" in out and f"pid{a.pid}" in out, out[-3000:]
        assert "CHECKPOINT_IN_USE" not in out
        send_commands(s, second)
        expected = expected_outputs(first + second, s)
        deadline = time.monotonic() + 60
        while output_count(s) < len(expected):
            assert a.poll() is None, a_log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"driver A decided {output_count(s)} of {len(expected)} in time"
            time.sleep(0.2)
        assert a.poll() is None, "driver A stopped"
        assert Counter(topic_outputs(s)) == Counter(expected)
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait(30)


def test_a_running_query_whose_lease_is_taken_stops_and_run_reports_lease_lost(
        spark, lease_settings: Settings) -> None:  # noqa: ANN001
    from app.validator import owner
    from app.validator.job import build_query, raise_if_fenced
    from app.validator.lease import LeaseLost
    from app.validator.owner import lease_config

    s = lease_settings.model_copy(update={"state_backend": "rocksdb", "lease_session_timeout_ms": 2000,
                                          "lease_max_poll_interval_ms": 3000})
    send_commands(s, _commands(0, 100))
    query = build_query(spark, s)
    try:
        held = owner._owners[str(query.id)].lease
        assert held is not None and held.held
        config = lease_config(s, held.config.checkpoint)
        other = LeaseConfig(**{**config.__dict__, "instance_id": "another-host", "client_id": "client-other"})
        with held._poll_lock:  # this driver stalls (as a partitioned host would): the coordinator expires it
            taker, _ = _acquire_within(other, 15)
        deadline = time.monotonic() + 30
        while query.isActive:
            assert time.monotonic() < deadline, "the fenced query kept running"
            time.sleep(0.1)
        with pytest.raises(LeaseLost, match="lost the checkpoint's lease to another member .*client-other"):
            raise_if_fenced(query)  # names what happened and who holds the lease now
        taker.release()
    finally:
        if query.isActive:
            query.stop()


def test_a_driver_stopped_with_ctrl_c_leaves_the_lease_group_so_another_host_need_not_wait_for_its_session(
        lease_settings: Settings, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) on a validator run by hand; SIGTERM, as ``arbiter run`` stops it, is checked by the scenario
    test's clean stop (test_pipeline_e2e), which starts a validator anyway."""
    stop = signal.SIGINT
    # A 60 s session: had the stopped driver's static member stayed, it would still own the lease afterwards.
    s = lease_settings.model_copy(update={"state_backend": "rocksdb", "max_offsets_per_trigger": 200,
                                          "var_dir": tmp_path / "host-a"})
    checkpoint = tmp_path / "checkpoint"
    send_commands(s, _commands(0, 100))
    a_log = tmp_path / "a.log"
    a = _start(s, a_log, checkpoint, {"ARBITER_LEASE_SESSION_TIMEOUT_MS": "60000"})
    try:
        _wait_for_outputs(s, a, a_log)
        a.send_signal(stop)  # to the driver's Python process only (PySpark's JVM ignores SIGINT, gets no SIGTERM)
        a.wait(60)
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait(10)
    out = a_log.read_text()
    assert "left lease group" in out, out[-3000:]
    config = _config(s, str(checkpoint), "host-b")
    assert ValidatorLease(config).holder() is None, "the stopped driver's member still owns the lease"
    b = ValidatorLease(config)
    b.acquire()
    try:
        assert b.held
    finally:
        b.release()


def test_a_session_timeout_at_the_brokers_minimum_is_accepted_and_one_below_is_refused_with_the_brokers_reason(
        lease_settings: Settings) -> None:
    # The local broker allows sessions down to 1,000 ms (group.min.session.timeout.ms in app/local/kafka_broker.py).
    at = ValidatorLease(_config(lease_settings, f"s3://bucket/{uuid.uuid4().hex}", "at", session_ms=1000))
    at.acquire()
    try:
        assert at.held
    finally:
        at.release()
    below = ValidatorLease(_config(lease_settings, f"s3://bucket/{uuid.uuid4().hex}", "below", session_ms=999,
                                   acquire_s=60))
    with pytest.raises(LeaseJoinFailed, match="INVALID_SESSION_TIMEOUT") as refused:
        below.acquire()  # not "leased by another driver": nobody holds it, the broker refused the join
    assert refused.value.code == "LEASE_JOIN_FAILED" and not below.held


def test_a_lease_topic_the_client_does_not_know_yet_is_waited_for_not_refused(settings: Settings) -> None:
    # A topic created a moment before the join can be missing from the client's first metadata: librdkafka reports
    # UNKNOWN_TOPIC_OR_PART (not retriable), which once ended the acquire as LEASE_JOIN_FAILED (seen in the suite).
    s = settings.model_copy(update={"topic_validator_leases": f"leases-late-{uuid.uuid4().hex[:8]}"})
    lease = ValidatorLease(_config(s, f"s3://bucket/{uuid.uuid4().hex}", "late", acquire_s=60))
    outcome: list[BaseException | None] = []
    worker = threading.Thread(target=lambda: outcome.append(_try(lease.acquire)))
    worker.start()
    time.sleep(3)  # the join has met the missing topic by now (the broker does not auto-create topics)
    ensure_lease_topic(s)
    worker.join(90)
    try:
        assert outcome == [None], outcome
        assert lease.held
    finally:
        lease.release()


def _try(fn: Callable[[], None]) -> BaseException | None:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - handed to the test thread
        return e
    return None
