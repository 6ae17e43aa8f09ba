"""The rocksdb backend survives ``kill -9`` mid-stream and a lost local state directory, and refuses a second job."""

from __future__ import annotations

import os
import shutil
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.settings import Settings, checkpoint_uri
from app.validator.job import build_query, drain
from app.validator.lock import CheckpointInUse
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import rocks_root
from commands import Command, CreateObject, DeleteObject, UpdateObject
from tests.integration.validator_oracle import (
    assert_restart_decided_the_rest,
    decided,
    expected_outputs,
    kill_mid_stream,
    output_count,
    send_commands,
    start_validator,
    topic_outputs,
)

pytestmark = pytest.mark.integration

T0 = datetime(2025, 6, 1, tzinfo=UTC)


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


def test_kill_9_mid_stream_then_restart_decides_exactly_the_rest_and_a_second_job_is_refused(
        spark, settings: Settings, tmp_path: Path) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"state_backend": "rocksdb", "max_offsets_per_trigger": 100, "snapshot_every": 3})
    commands = _commands(2400, 200)
    send_commands(s, commands)
    log = tmp_path / "job.log"
    job = start_validator(s, log)
    try:
        deadline = time.monotonic() + 150
        while output_count(s) == 0:
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the job wrote nothing in 150 s"
            time.sleep(0.1)
        with pytest.raises(CheckpointInUse, match="in use by another validator job"):
            build_query(spark, s)
    except BaseException:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        raise
    at_kill = kill_mid_stream(job, s, commands, log)  # once a third is decided and the rest is not
    drain(spark, s, timeout=180)
    assert_restart_decided_the_rest(s, commands)
    assert len(at_kill) < len(commands) == len(decided(s)[1])


def test_lost_local_state_is_restored_from_the_checkpoint_location(spark, settings: Settings) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"state_backend": "rocksdb", "max_offsets_per_trigger": 150, "snapshot_every": 2,
                                    "snapshots_kept": 1})
    first = _commands(600, 100)
    send_commands(s, first)
    drain(spark, s, timeout=180)
    uri = checkpoint_uri(s)
    assert any(ShardStore(uri, p).snapshots() for p in range(s.partitions)), "no snapshot was taken"
    shutil.rmtree(rocks_root(s, uri))
    second = _commands(300, 100, start=600)
    send_commands(s, second)
    drain(spark, s, timeout=180)
    got = topic_outputs(s)
    assert sorted(got) == sorted(expected_outputs(first + second, s))  # a clean stop and a restore replay nothing
    assert rocks_root(s, uri).is_dir()
