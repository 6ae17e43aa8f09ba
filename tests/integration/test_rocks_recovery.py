"""The rocksdb backend survives ``kill -9`` mid-stream and a lost local state directory, and refuses a second job."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from app.settings import Settings, checkpoint_uri
from app.validator.fold import limits_for
from app.validator.job import build_query, drain
from app.validator.murmur2 import partition_for
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.lock import CheckpointInUse
from app.validator.rocks.shard import rocks_root
from app.validator.topic_io import produce, read_all
from commands import Command, CreateObject, DeleteObject, Event, ObjectState, UpdateObject, decide
from schemas import codec

pytestmark = pytest.mark.integration

T0 = datetime(2025, 6, 1, tzinfo=UTC)
Out = tuple[str, bytes | None, bytes | None, int]


def _commands(n: int, objects: int, start: int = 0) -> list[Command]:
    out: list[Command] = []
    for i in range(start, start + n):
        oid, at = f"k{i % objects}", T0 + timedelta(seconds=i)
        if i < objects:
            out.append(CreateObject(f"c{i}", oid, "alice", at, document='{"a": 1}'))
        elif i % 97 == 0:
            out.append(DeleteObject(f"d{i}", oid, "alice", at))
        else:
            out.append(UpdateObject(f"u{i}", oid, "alice" if i % 5 else "bob", at, patch='{"b": 1}'))
    return out


def _expected(commands: list[Command], settings: Settings) -> set[Out]:
    limits = limits_for(settings)
    states: dict[str, ObjectState | None] = {}
    out: set[Out] = set()
    for cmd in commands:
        d = decide(states.get(cmd.object_id), cmd, limits)
        states[cmd.object_id] = d.state
        key = cmd.object_id.encode()
        topic = settings.topic_events if isinstance(d.outcome, Event) else settings.topic_rejections
        out.add((topic, key, codec.encode_outcome(d.outcome), partition_for(key, settings.partitions)))
    return out


def _got(settings: Settings) -> list[Out]:
    return [(r.topic, r.key, r.value, r.partition) for t in (settings.topic_events, settings.topic_rejections)
            for r in read_all(settings, t)]


def _send(settings: Settings, commands: list[Command]) -> None:
    produce(settings, [(c.object_id.encode(), codec.encode_command(c)) for c in commands])


def _written(settings: Settings) -> int:
    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "probe", "log_level": 0})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(settings.topic_events, p), timeout=5)[1]
                   for p in range(settings.partitions))
    finally:
        c.close()


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env.update({
        "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "ARBITER_PARTITIONS": str(settings.partitions),
        "ARBITER_TOPIC_COMMANDS": settings.topic_commands, "ARBITER_TOPIC_EVENTS": settings.topic_events,
        "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections, "ARBITER_VAR_DIR": str(settings.var_dir),
        "ARBITER_STATE_BACKEND": "rocksdb", "ARBITER_SPARK_MASTER": "local[2]",
        "ARBITER_MAX_OFFSETS_PER_TRIGGER": str(settings.max_offsets_per_trigger),
        "ARBITER_TRIGGER_INTERVAL": "0 seconds", "ARBITER_SNAPSHOT_EVERY": str(settings.snapshot_every),
        "PYSPARK_PYTHON": sys.executable,
    })
    return env


def test_kill_9_mid_stream_then_restart_writes_exactly_the_uninterrupted_outputs_and_a_second_job_is_refused(
        spark, settings: Settings, tmp_path: Path) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"state_backend": "rocksdb", "max_offsets_per_trigger": 300, "snapshot_every": 3})
    commands = _commands(2400, 200)
    _send(s, commands)
    log = (tmp_path / "job.log").open("wb")
    job = subprocess.Popen([sys.executable, "-m", "app.validator"], env=_env(s), stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True, cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 150
        while _written(s) == 0:
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job wrote nothing in 150 s"
            time.sleep(0.2)
        with pytest.raises(CheckpointInUse, match="in use by another validator job"):
            build_query(spark, s)
        time.sleep(1.0)  # into a later batch; batches run back to back, so the kill lands inside one
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the job's own process group: its driver, JVM and Python workers
        job.wait(30)
        log.close()
    partial = _written(s)
    assert partial < len(commands), "the job finished before the kill; the test proved nothing"
    drain(spark, s, timeout=180)
    got = _got(s)
    expected = _expected(commands, s)
    assert set(got) == expected, f"{len(set(got) - expected)} divergent, {len(expected - set(got))} missing"
    assert len(got) >= len(expected)


def test_lost_local_state_is_restored_from_the_checkpoint_location(spark, settings: Settings) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"state_backend": "rocksdb", "max_offsets_per_trigger": 150, "snapshot_every": 2,
                                    "snapshots_kept": 1})
    first = _commands(600, 100)
    _send(s, first)
    drain(spark, s, timeout=180)
    uri = checkpoint_uri(s)
    assert any(ShardStore(uri, p).snapshots() for p in range(s.partitions)), "no snapshot was taken"
    shutil.rmtree(rocks_root(s, uri))
    second = _commands(300, 100, start=600)
    _send(s, second)
    drain(spark, s, timeout=180)
    got = _got(s)
    assert set(got) == _expected(first + second, s)
    assert len(got) == len(first) + len(second)  # a clean stop and a restore replay nothing
    assert rocks_root(s, uri).is_dir()
