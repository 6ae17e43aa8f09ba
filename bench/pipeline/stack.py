"""The whole pipeline as ``arbiter run --no-scenario`` starts it, in a throwaway var dir on free ports, stopped by PID.

Nothing collides with a user's own stack: its own ``ARBITER_VAR_DIR`` (broker data, state, checkpoints, read model,
pidfiles, logs), its own API, broker and controller ports, and a random 48-byte auth secret. Settings that would
point two stacks at one directory are dropped from the inherited environment; any other ``ARBITER_*`` setting
exported before the benchmark (``ARBITER_TRIGGER_INTERVAL``, ``ARBITER_PARTITIONS``, ...) applies to the stack.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.local.kafka_broker import free_port
from app.settings import Settings

#: Settings naming directories or files outside ARBITER_VAR_DIR: inherited, they would be shared with a user's stack.
_SHARED = ("ARBITER_CHECKPOINT_LOCATION", "ARBITER_ROCKS_DIR", "ARBITER_AUDIT_DIR", "ARBITER_LOG_FILE",
           "ARBITER_READ_MODEL_DIR")
COMPONENTS = ("validator", "api", "project-db", "project-audit", "project-log")


@dataclass
class Stack:
    """A running ``arbiter run --no-scenario``: its process (own session), var dir, API URL and environment."""

    proc: subprocess.Popen[bytes]
    var: Path
    log: Path
    env: dict[str, str]

    @classmethod
    def start(cls, work: Path, timeout: float = 420.0,
              say: Callable[[str], None] = print, tree: Path | None = None) -> Stack:
        """Start the stack under ``work`` and return once ``arbiter run`` says it is serving.

        ``tree``: run the stack of another checkout (e.g. a worktree of an older commit, with its jars fetched and
        its native build made), so both are measured with this tree's clients.
        """
        kafka_port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in _SHARED}
        env.update({
            "ARBITER_VAR_DIR": str(work / "var"),
            "ARBITER_API_HOST": "127.0.0.1",
            "ARBITER_API_PORT": str(free_port()),
            "ARBITER_KAFKA_PORT": str(kafka_port),
            "ARBITER_KAFKA_CONTROLLER_PORT": str(free_port()),
            "ARBITER_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka_port}",
            "ARBITER_AUTH_SECRET": secrets.token_urlsafe(48),
            "PYTHONUNBUFFERED": "1",
        })
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        log = work / "arbiter-run.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run", "--no-scenario"], env=env,  # noqa: S603
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=tree)
        stack = cls(proc, work / "var", log, env)
        say(f"starting the pipeline (arbiter run --no-scenario, pid {proc.pid}, var {stack.var}) ...")
        deadline, shown = time.monotonic() + timeout, 0
        try:
            while True:
                lines = log.read_text(errors="replace").splitlines()
                for line in lines[shown:]:
                    if line.startswith(("[", "      ")) and "token" not in line.lower():
                        say(f"  {line.strip()}")
                shown = len(lines)
                if any(line.startswith("Serving") for line in lines):
                    return stack
                if proc.poll() is not None:
                    raise SystemExit(f"arbiter run exited with code {proc.returncode}; see {log}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"arbiter run was not serving within {timeout:.0f}s; see {log}")
                time.sleep(0.5)
        except BaseException:
            stack.stop()
            raise

    def settings(self) -> Settings:
        """The stack's settings: this process's environment (which the stack inherited) with the stack's overrides."""
        e = self.env
        return Settings(var_dir=Path(e["ARBITER_VAR_DIR"]), api_host=e["ARBITER_API_HOST"],
                        api_port=int(e["ARBITER_API_PORT"]), kafka_port=int(e["ARBITER_KAFKA_PORT"]),
                        kafka_controller_port=int(e["ARBITER_KAFKA_CONTROLLER_PORT"]),
                        kafka_bootstrap=e["ARBITER_KAFKA_BOOTSTRAP"], auth_secret=e["ARBITER_AUTH_SECRET"])

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.env['ARBITER_API_PORT']}"

    @property
    def secret(self) -> str:
        return self.env["ARBITER_AUTH_SECRET"]

    def pids(self) -> dict[str, int]:
        """PIDs of the running components, from the pidfiles ``arbiter run`` and the broker keep; the run itself too."""
        found = {"arbiter run": self.proc.pid}
        for name, path in [(n, self.var / "run" / f"{n}.pid") for n in COMPONENTS] + \
                          [("broker", self.var / "kafka" / "broker.pid")]:
            try:
                found[name] = int(path.read_text().strip())
            except (FileNotFoundError, ValueError):
                pass
        return found

    def stop(self, timeout: float = 90.0) -> None:
        """Ctrl-C ``arbiter run`` (it stops its children by PID); SIGKILL whatever of ours outlives ``timeout``."""
        left = self.pids()
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        for name, pid in left.items():  # each component leads its own session, by the PID in its pidfile
            if name != "arbiter run" and self._ours(pid):
                _signal_group(pid, signal.SIGKILL)

    def _ours(self, pid: int) -> bool:
        """True if ``pid`` is alive and runs with this stack's var dir (not a reused PID of someone else's)."""
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return False
        return f"ARBITER_VAR_DIR={self.var}".encode() in environ


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
