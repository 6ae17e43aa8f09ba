"""Start Arbiter's processes as children, wait until each is healthy, and stop them all by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import SetupError


@dataclass
class Service:
    """One child process: ``argv`` runs it, ``ready()`` says when it is healthy."""

    name: str
    argv: list[str]
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 180.0
    pid: int | None = None
    proc: subprocess.Popen[bytes] | None = None


class Supervisor:
    """Owns the children it started: pidfiles in ``run_dir``, logs in ``log_dir``; ``stop_all`` in reverse order."""

    def __init__(self, run_dir: Path, log_dir: Path) -> None:
        self.run_dir, self.log_dir = run_dir, log_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.services: list[Service] = []

    def log_of(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, svc: Service, progress: Callable[[str], None] = print) -> None:
        """Start ``svc`` in its own session (so its Spark JVM and workers stop with it) and wait until ready."""
        log = open(self.log_of(svc.name), "ab")  # noqa: SIM115 - kept open for the child's lifetime
        svc.proc = subprocess.Popen(  # noqa: S603
            svc.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **svc.env}, start_new_session=True,
        )
        log.close()
        svc.pid = svc.proc.pid
        (self.run_dir / f"{svc.name}.pid").write_text(str(svc.pid))
        self.services.append(svc)
        deadline = time.monotonic() + svc.timeout
        started = time.monotonic()
        while True:
            if svc.proc.poll() is not None:
                tail = self.log_of(svc.name).read_text(errors="replace")[-2500:]
                raise SetupError(f"{svc.name} exited with code {svc.proc.returncode}; last log lines:\n{tail}")
            try:
                if svc.ready():
                    progress(f"      {svc.name} ready (pid {svc.pid}, {time.monotonic() - started:.1f}s)")
                    return
            except Exception:  # noqa: BLE001, S110 - not ready yet; the deadline below reports it
                pass
            if time.monotonic() > deadline:
                raise SetupError(f"{svc.name} was not healthy within {svc.timeout:.0f}s; see {self.log_of(svc.name)}")
            time.sleep(0.5)

    def stop_all(self, timeout: float = 30.0) -> None:
        """SIGTERM each child's process group (its own PID), newest first; SIGKILL what outlives ``timeout``."""
        for svc in reversed(self.services):
            if svc.proc is None or svc.pid is None:
                continue
            if svc.proc.poll() is None:
                _signal_group(svc.pid, signal.SIGTERM)
                try:
                    svc.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(svc.pid, signal.SIGKILL)
                    svc.proc.wait(timeout=10)
            # Children of the child (a Spark JVM, its Python workers) share its process group: make sure none is left.
            _signal_group(svc.pid, signal.SIGKILL)
            (self.run_dir / f"{svc.name}.pid").unlink(missing_ok=True)
        self.services.clear()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def arbiter_argv(*args: str) -> list[str]:
    """Run an ``arbiter`` subcommand with this interpreter (no reliance on PATH)."""
    return [sys.executable, "-m", "app.cli", *args]
