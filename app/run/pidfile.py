"""The servers Arbiter starts (Kafka broker, PostgreSQL) are tracked by a pidfile and stopped by that PID only."""

from __future__ import annotations

import os
from pathlib import Path


def running_pid(pidfile: Path) -> int | None:
    """The PID in ``pidfile`` if that process is alive, else None (a stale pidfile is removed)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pidfile.unlink(missing_ok=True)
        return None
    return pid


def alive(pid: int) -> bool:
    """True while ``pid`` runs; reaps it if it is our zombie child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def process_start(pid: int) -> str | None:
    """Return ``pid``'s start time as the kernel gives it (Linux ``/proc``), None if unknown or the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()[19].decode()


def still_running(pid: int, started: str | None) -> bool:
    """Whether ``pid`` is still the process that had start time ``started`` (just alive where /proc is missing):
    a pid reused by another process is not mistaken for the one we watched."""
    return alive(pid) and (started is None or process_start(pid) == started)
