"""Start Arbiter's processes as children, wait until each is healthy, restart those that exit, stop them all by PID.

Start-up fails fast (``start`` raises ``SetupError``); after start-up a child that exits is restarted with exponential
backoff (``app.run.restart.Backoff``) by ``check``, which never waits, so one crash-looping component cannot stop the
others from being watched — or the API from serving.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import SetupError
from app.run.restart import Backoff, Health, describe_exit, utc_iso, write_status


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
    """Owns the children it started: pidfiles in ``run_dir``, logs in ``log_dir``; ``stop_all`` in reverse order.

    ``status_file`` (if given) is rewritten whenever a child's health changes; ``report`` receives one message per
    exit and restart; ``max_restarts`` (``None``: never give up) bounds the restarts of each child.
    """

    def __init__(self, run_dir: Path, log_dir: Path, status_file: Path | None = None, backoff: Backoff | None = None,
                 max_restarts: int | None = None, report: Callable[[str], None] = print) -> None:
        self.run_dir, self.log_dir, self.status_file = run_dir, log_dir, status_file
        run_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.backoff = backoff or Backoff()
        self.max_restarts, self.report = max_restarts, report
        self.services: list[Service] = []
        self.health: dict[str, Health] = {}
        self._lock = threading.RLock()  # one of check(), start()'s spawn, stop_all() at a time
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def log_of(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, svc: Service, progress: Callable[[str], None] = print) -> None:
        """Start ``svc`` in its own session (so its Spark JVM and workers stop with it) and wait until ready."""
        self.spawn(svc)
        self.wait_ready(svc, progress)

    def spawn(self, svc: Service) -> None:
        """Start ``svc`` without waiting: another start can go on meanwhile; ``wait_ready`` waits for it later."""
        with self._lock:
            health = self.health[svc.name] = Health(svc.name, log=str(self.log_of(svc.name)))
            self._spawn(svc, health)
            health.state = "starting"
            self.services.append(svc)
            self._publish()

    def wait_ready(self, svc: Service, progress: Callable[[str], None] = print) -> None:
        """Wait until spawned ``svc`` is ready (its ``timeout`` counted from its spawn); raise ``SetupError`` if it or
        another service still starting exits first, or it is not ready in time."""
        assert svc.proc is not None
        health = self.health[svc.name]
        started = health._started
        deadline = started + svc.timeout
        while True:
            for other in (o for o in self.services if self.health[o.name].state == "starting"):  # svc among them
                if other.proc is not None and other.proc.poll() is not None:
                    tail = self.log_of(other.name).read_text(errors="replace")[-2500:]
                    self._failed_at_start(self.health[other.name],
                                          f"{describe_exit(other.proc.returncode)} during start-up")
                    raise SetupError(f"{other.name} exited with code {other.proc.returncode}; last log lines:\n{tail}")
            try:
                if svc.ready():
                    with self._lock:
                        health.state = "running"
                        self._publish()
                    progress(f"      {svc.name} ready (pid {svc.pid}, {time.monotonic() - started:.1f}s)")
                    return
            except Exception:  # noqa: BLE001, S110 - not ready yet; the deadline below reports it
                pass
            if time.monotonic() > deadline:
                self._failed_at_start(health, f"not healthy within {svc.timeout:.0f}s")
                raise SetupError(f"{svc.name} was not healthy within {svc.timeout:.0f}s; see {self.log_of(svc.name)}")
            time.sleep(0.5)

    def check(self) -> None:
        """One pass over the children, never waiting: note who exited, schedule its restart, restart those due."""
        with self._lock:
            if self._stop.is_set():
                return
            now, changed = time.monotonic(), False
            for svc in self.services:
                health = self.health[svc.name]
                if health.state == "running" and svc.proc is not None and svc.proc.poll() is not None:
                    self._exited(svc, health, now)
                    changed = True
                elif health.state == "restarting" and health._due is not None and now >= health._due:
                    self._restart(svc, health)
                    changed = True
            if changed:
                self._publish()

    def monitor(self, interval: float = 1.0) -> None:
        """Call ``check`` every ``interval`` seconds in a daemon thread until ``stop_all``."""
        def watch() -> None:
            while not self._stop.wait(interval):
                try:
                    self.check()
                except Exception as e:  # noqa: BLE001 - a bug here must be seen, and must not end the watching
                    self.report(f"supervisor: check failed: {e!r}")

        self._watcher = threading.Thread(target=watch, name="arbiter-supervisor", daemon=True)
        self._watcher.start()

    def stop_all(self, timeout: float = 30.0) -> None:
        """SIGTERM each child, newest first; SIGKILL its process group if it outlives ``timeout``, and what it leaves.

        The signal goes to the child alone, not its group: the validator's driver must still reach its Spark JVM
        (same group) to stop the query and leave its lease group cleanly; a JVM killed with it would leave the
        lease to expire (``lease_session_timeout_ms``) before another driver could take the checkpoint.
        """
        self._stop.set()  # no restart may race the stop
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()
        with self._lock:
            for svc in reversed(self.services):
                if svc.proc is None or svc.pid is None:
                    continue
                if svc.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(svc.pid, signal.SIGTERM)
                    try:
                        svc.proc.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        _signal_group(svc.pid, signal.SIGKILL)
                        svc.proc.wait(timeout=10)
                # Children of the child (a Spark JVM, its Python workers) share its process group: make sure none is left.
                _signal_group(svc.pid, signal.SIGKILL)
                (self.run_dir / f"{svc.name}.pid").unlink(missing_ok=True)
            self.services.clear()
            self.health.clear()
            if self.status_file is not None:
                self.status_file.unlink(missing_ok=True)
            self._watcher = None
            self._stop.clear()

    def _spawn(self, svc: Service, health: Health) -> None:
        """Start ``svc``'s process (log appended, own session), write its pidfile, mark it running."""
        with open(self.log_of(svc.name), "ab") as log:
            svc.proc = subprocess.Popen(  # noqa: S603
                svc.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **svc.env}, start_new_session=True,
            )
        svc.pid = svc.proc.pid
        (self.run_dir / f"{svc.name}.pid").write_text(str(svc.pid))
        health.pid, health.state, health._started = svc.pid, "running", time.monotonic()
        health.next_restart_at, health.backoff_s, health._due = None, None, None

    def _exited(self, svc: Service, health: Health, now: float) -> None:
        """Record ``svc``'s exit, clear what it left in its group, and schedule its restart (or give up)."""
        assert svc.proc is not None and svc.pid is not None
        code, pid, up = svc.proc.returncode, svc.pid, now - health._started
        _signal_group(pid, signal.SIGKILL)  # an orphaned Spark JVM or worker would hold the state locks
        (self.run_dir / f"{svc.name}.pid").unlink(missing_ok=True)
        svc.pid = None  # its group is cleared: stop_all must not signal that number again
        health._failures = 1 if up >= self.backoff.reset_after else health._failures + 1
        health.pid, health.last_exit_code, health.last_failure_at = None, code, utc_iso(time.time())
        tail = _tail(self.log_of(svc.name))
        # The CLI's "arbiter: error [CODE]" line (e.g. CHECKPOINT_LEASED) may be followed by shutdown chatter.
        coded = [line for line in tail if "arbiter: error [" in line]
        last_line = f"; {coded[-1][:300]}" if coded else f"; last log line: {tail[-1][:200]}" if tail else ""
        if self.max_restarts is not None and health.restarts >= self.max_restarts:
            health.state = "failed"
            health.last_failure = f"{describe_exit(code)}, gave up after {health.restarts} restarts{last_line}"
            plan = f"not restarting it: gave up after {health.restarts} restarts"
        else:
            health.last_failure = f"{describe_exit(code)}{last_line}"
            plan = f"restart #{health.restarts + 1} in {self._schedule(health, now):g} s"
        self.report(f"{svc.name} (pid {pid}) {describe_exit(code)} after {up:.1f} s up; {plan}; "
                    f"last lines of {self.log_of(svc.name)}:\n" + "\n".join("    " + line for line in tail))

    def _restart(self, svc: Service, health: Health) -> None:
        number = health.restarts + 1
        with open(self.log_of(svc.name), "a") as log:
            log.write(f"\n--- arbiter run: restart #{number} of {svc.name} at {utc_iso(time.time())} "
                      f"after {describe_exit(health.last_exit_code or 0)} ---\n")
        try:
            self._spawn(svc, health)
        except OSError as e:
            health._failures += 1
            health.last_failure, health.last_failure_at = f"could not start: {e}", utc_iso(time.time())
            self.report(f"{svc.name} could not be restarted: {e}; "
                        f"restart #{number} in {self._schedule(health, time.monotonic()):g} s")
            return
        health.restarts = number
        self.report(f"{svc.name} restarted (pid {svc.pid}, restart #{number})")

    def _schedule(self, health: Health, now: float) -> float:
        delay = self.backoff.delay(health._failures)
        health.state, health.backoff_s, health._due = "restarting", delay, now + delay
        health.next_restart_at = utc_iso(time.time() + delay)
        return delay

    def _failed_at_start(self, health: Health, why: str) -> None:
        with self._lock:
            health.state, health.last_failure, health.last_failure_at = "failed", why, utc_iso(time.time())
            self._publish()

    def _publish(self) -> None:
        if self.status_file is not None:
            write_status(self.status_file, list(self.health.values()))


def _tail(path: Path, lines: int = 5) -> list[str]:
    """The last ``lines`` non-blank lines of ``path``, read from its end (logs grow without bound)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return [f"(log unreadable: {e})"]
    return [line for line in text.splitlines() if line.strip()][-lines:]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def arbiter_argv(*args: str) -> list[str]:
    """Run an ``arbiter`` subcommand with this interpreter (no reliance on PATH)."""
    return [sys.executable, "-m", "app.cli", *args]
