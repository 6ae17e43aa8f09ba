"""The rocksdb backend on a Spark standalone cluster of two workers on 127.0.0.1, each with its own local state
directory: killing one mid-stream loses nothing, and its shards are restored on the survivor.

Runs ``bench.validator.rocks_cluster_kill``'s scenario against the session's broker: a master and two one-core
workers, ``python -m app.validator`` with the rocksdb backend over 3,000 commands in 200-offset batches, SIGKILL of
the second worker's process group (worker, executor, its Python workers) once a fifth of the outcomes are out, then the topics
compared with ``commands.decide`` run in offset order. About a minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.validator.rocks_cluster_kill import run

pytestmark = pytest.mark.integration


def test_killing_a_worker_mid_stream_loses_nothing_and_diverges_nowhere(kafka_bootstrap: str, tmp_path: Path) -> None:
    lines: list[str] = []
    result = run(kafka_bootstrap, tmp_path, lines.append, tag=f"rc-{tmp_path.name}")
    assert 0 < result.written_at_kill < result.commands, lines  # the worker died mid-stream, not before or after
    assert result.divergent == 0, lines
    assert result.missing == 0, lines
    assert result.records >= result.commands
    # Separate local dirs, as two hosts: each of the dead worker's shards was restored on the survivor from the
    # checkpoint location (none found level on the survivor's disk).
    assert result.victim_shards, lines
    assert {o.partition for o in result.taken_over} == result.victim_shards, lines
    assert all(o.source != "local" and o.bytes > 0 for o in result.taken_over), lines
