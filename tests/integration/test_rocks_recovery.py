"""The rocksdb backend survives ``kill -9`` mid-stream and a lost local state directory, and refuses a second job."""

from __future__ import annotations

import json
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
from app.validator.rocks.server import HOLD_AFTER_WRITE
from app.validator.rocks.shard import rocks_root
from app.validator.source import BATCH_COPIES, offsets_per_trigger
from commands import Command, CreateObject, DeleteObject, UpdateObject
from tests.integration.validator_oracle import (
    assert_restart_decided_the_rest,
    assert_topics_equal_the_topic_oracle,
    decided,
    expected_outputs,
    kill_mid_stream,
    output_count,
    rules_versions_seen,
    send_commands,
    send_with_deploys,
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
    """The kill lands, every time, after the shards wrote a batch and before Spark committed it: the restart must
    re-run that batch id, and only the batch-id memo makes the re-run re-emit instead of deciding twice."""
    s = settings.model_copy(update={"state_backend": "rocksdb", "max_offsets_per_trigger": 100, "snapshot_every": 3})
    commands = _commands(2400, 200)
    send_with_deploys(s, commands)  # two rules deploys and a forged one in the middle of the stream
    log, held = tmp_path / "job.log", tmp_path / "held"
    job = start_validator(s, log, {HOLD_AFTER_WRITE: f"{HELD_BATCH}:{held}"})
    try:
        deadline = time.monotonic() + 300  # covers the job's Spark start: 95 s of 150 went to it at load 50
        while output_count(s) == 0:
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the job wrote nothing in 300 s"
            time.sleep(0.1)
        with pytest.raises(CheckpointInUse, match="in use by another validator job"):
            build_query(spark, s)
        while not held.exists():  # a shard server has written batch HELD_BATCH and holds its reply
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no shard wrote batch {HELD_BATCH} in 300 s"
            time.sleep(0.1)
    except BaseException:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        raise
    at_kill = kill_mid_stream(job, s, commands, log)  # the held batch is in the shards, not on the topics
    drain(spark, s, timeout=180)
    assert_topics_equal_the_topic_oracle(s)  # rules switching at the control records, as the oracle predicts
    assert len(at_kill) < len(commands) <= len(decided(s)[1])
    assert {c.command_id for c in commands} <= {cid for _, cid in decided(s)[1]}
    seen = rules_versions_seen(s)
    assert seen[None] and seen[1] and seen[2], seen
    assert shard_replays(s) > 0, "the restart re-ran no batch: the kill did not land between write and commit"


HELD_BATCH = 10  # 10 batches of 100 of 2,400 commands: past the third that kill_mid_stream waits for


def shard_replays(s: Settings) -> int:
    """Return the batch re-runs the shard servers of ``s`` re-emitted from their memo (their stats files)."""
    total = 0
    for f in (s.var_dir / "status" / "shards").glob("*.json"):
        total += sum(shard.get("replays", 0) for shard in json.loads(f.read_text())["shards"].values())
    return total


def test_a_backlog_after_an_outage_drains_in_batches_of_the_memory_derived_cap(
        spark, settings: Settings) -> None:  # noqa: ANN001
    """No ``max_offsets_per_trigger``: the cap derived from ``batch_memory_mb`` splits the backlog a restart finds."""
    s = settings.model_copy(update={"state_backend": "rocksdb", "batch_memory_mb": 2000})
    cap = offsets_per_trigger(s)
    assert cap == 2000 // (BATCH_COPIES * s.max_message_bytes // (1024 * 1024)) == 200
    first, backlog = _commands(150, 50), _commands(5 * cap, 50, start=150)
    send_commands(s, first)
    drain(spark, s, timeout=180)
    before = _batch_offsets(s)
    send_commands(s, backlog)  # the validator is down while these arrive
    drain(spark, s, timeout=300)
    after = _batch_offsets(s)
    sizes = [sum(after[b].values()) - sum(after[b - 1].values()) for b in sorted(after) if b > max(before)]
    assert sum(sizes) == len(backlog)
    assert len(sizes) >= 5 and max(sizes) <= cap, sizes
    assert_restart_decided_the_rest(s, first + backlog)
    assert sorted(topic_outputs(s)) == sorted(expected_outputs(first + backlog, s))


def _batch_offsets(s: Settings) -> dict[int, dict[str, int]]:
    """Return each micro-batch's end offsets of the commands topic, from Spark's offset log in the checkpoint."""
    out: dict[int, dict[str, int]] = {}
    for f in (Path(checkpoint_uri(s)) / "offsets").iterdir():
        if f.name.isdigit():
            out[int(f.name)] = json.loads(f.read_text().splitlines()[2])[s.topic_commands]
    return out


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
