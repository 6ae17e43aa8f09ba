"""Exclusive file locks: one process writes a shard, one job owns a checkpoint (``fcntl.flock``), under ``rocks_root``."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

from app.errors import ArbiterError
from app.settings import Settings


def rocks_root(settings: Settings, checkpoint: str) -> Path:
    """Return the local root of this checkpoint's shards: ``rocks_dir`` (default ``<var_dir>/rocks``)/<hash>."""
    base = settings.path(settings.rocks_dir) if str(settings.rocks_dir) not in ("", ".") else settings.path(
        settings.var_dir) / "rocks"
    return base / hashlib.sha256(checkpoint.encode()).hexdigest()[:16]


class ShardBusy(ArbiterError):
    """Another process holds the shard; it was not opened."""

    code = "SHARD_BUSY"


class CheckpointInUse(ArbiterError):
    """Another job runs on this checkpoint location; this one was refused before touching any state."""

    code = "CHECKPOINT_IN_USE"


class FileLock:
    """An exclusive ``flock`` on one file, released by ``release`` or by the process's death (even ``kill -9``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; return whether this object now holds it."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def acquire(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the lock; raise ``ShardBusy`` naming the holder's pid."""
        deadline = time.monotonic() + timeout_s
        delay = 0.005
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise ShardBusy(f"{self.path} is held by pid {self.holder()} for more than {timeout_s} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def holder(self) -> str:
        """Return the pid written by the current holder, or '?'."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    @property
    def fd(self) -> int | None:
        """The locked file's descriptor while held (to check the file on disk is still the one locked)."""
        return self._fd


def job_lock_path(checkpoint: str, rocks_dir: Path) -> Path:
    """Return the lock file guarding ``checkpoint``: inside it when it is a local directory, else under ``rocks_dir``.

    A lock file on the checkpoint's own disk refuses a second job on any host that mounts it; for a remote
    URI (HDFS, S3) only jobs on this host are refused, so run one driver per checkpoint there (docs/concepts/state-backends.md).
    """
    if "://" not in checkpoint or checkpoint.startswith("file://"):
        path = checkpoint.removeprefix("file://")
        return Path(os.path.abspath(path)) / "rocks" / "job.lock"
    digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    return rocks_dir / f"job-{digest}.lock"


#: How long a job lock held by this very process is waited for: an earlier query of this driver still letting go.
OWN_RELEASE_WAIT_S = 10.0


def acquire_job_lock(checkpoint: str, rocks_dir: Path) -> FileLock:
    """Take the job lock for ``checkpoint`` or raise ``CheckpointInUse``: at once if another process holds it.

    When this process holds it, an earlier query of this driver on the same checkpoint is still letting go (its
    watch releases the lock a moment after the query stops, or later on a loaded machine: a ``drain`` right after
    another failed so under load), so that release is waited for, up to ``OWN_RELEASE_WAIT_S``.
    """
    lock = FileLock(job_lock_path(checkpoint, rocks_dir))
    deadline = time.monotonic() + OWN_RELEASE_WAIT_S
    while not lock.try_acquire():
        if lock.holder() != str(os.getpid()) or time.monotonic() > deadline:
            raise CheckpointInUse(f"checkpoint {checkpoint} is in use by another validator job (pid {lock.holder()}, "
                                  f"lock {lock.path}); stop it first")
        time.sleep(0.05)
    return lock
