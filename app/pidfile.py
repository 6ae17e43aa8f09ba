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
