"""Shard and job locks: exclusive across processes, released by death (``kill -9``), remote URIs lock locally."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.validator import lock as lock_module
from app.validator.lock import CheckpointInUse, FileLock, ShardBusy, acquire_job_lock, job_lock_path
from app.validator.rocks.memory import shard_options

pytestmark = pytest.mark.unit

HOLD = """
import sys, time
from pathlib import Path
from app.validator.lock import FileLock
FileLock(Path(sys.argv[1])).acquire(5)
print("held", flush=True)
time.sleep(60)
"""


def test_a_lock_held_by_another_process_is_refused_until_that_process_dies(tmp_path: Path) -> None:
    path = tmp_path / "shard-0000.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        mine = FileLock(path)
        assert not mine.try_acquire()
        with pytest.raises(ShardBusy, match=f"pid {holder.pid}"):
            mine.acquire(0.2)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    started = time.monotonic()
    mine.acquire(5)
    assert mine.held and time.monotonic() - started < 5
    mine.release()
    mine.release()  # idempotent
    assert not mine.held


def test_a_second_job_on_one_checkpoint_is_refused_even_in_the_same_process(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock_module, "OWN_RELEASE_WAIT_S", 0.3)
    ckpt = str(tmp_path / "ckpt")
    first = acquire_job_lock(ckpt, tmp_path / "rocks")
    with pytest.raises(CheckpointInUse, match="in use by another validator job"):
        acquire_job_lock(ckpt, tmp_path / "rocks")
    with pytest.raises(CheckpointInUse):
        acquire_job_lock(f"file://{ckpt}", tmp_path / "elsewhere")  # the same directory, spelled as a URI
    first.release()
    acquire_job_lock(ckpt, tmp_path / "rocks").release()


def test_job_lock_lives_in_a_local_checkpoint_and_under_rocks_dir_for_a_remote_one(tmp_path: Path) -> None:
    assert job_lock_path(str(tmp_path / "c"), tmp_path / "r") == tmp_path / "c" / "rocks" / "job.lock"
    remote = job_lock_path("s3://bucket/checkpoints/validator", tmp_path / "r")
    assert remote.parent == tmp_path / "r" and remote.name.startswith("job-")


def test_one_memory_budget_per_process() -> None:
    assert shard_options(16, 4) is shard_options(16, 4)
    assert shard_options(16, 4) is not shard_options(32, 4)


def test_a_lock_this_process_is_letting_go_of_is_waited_for(tmp_path: Path) -> None:
    """A drain right after another in one driver: the first query's watch releases the lock a moment after it
    stopped (later on a loaded machine); the second waits for that instead of failing CHECKPOINT_IN_USE."""
    ckpt = str(tmp_path / "ckpt")
    first = acquire_job_lock(ckpt, tmp_path / "rocks")
    threading.Timer(0.5, first.release).start()
    second = acquire_job_lock(ckpt, tmp_path / "rocks")  # raised CHECKPOINT_IN_USE at once before
    assert second.held and not first.held
    second.release()
