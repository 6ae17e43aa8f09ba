"""Restart bookkeeping for supervised components: the backoff policy, each one's health, and ``components.json``.

The supervisor decides *when* to restart from ``Backoff``; what happened is kept in one ``Health`` per component and
published as a small JSON file that the API's status page reads (the API runs in another process).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.settings import Settings

STATUS_FILE = "components.json"


def components_path(settings: Settings) -> Path:
    """Return ``<var_dir>/status/components.json``, written by ``arbiter run`` and read by the status page."""
    return settings.path(settings.var_dir) / "status" / STATUS_FILE


@dataclass(frozen=True)
class Backoff:
    """Exponential restart delays: ``initial`` doubling per consecutive failure, at most ``cap``.

    A component that stayed up ``reset_after`` seconds before it exited counts as healthy again: its next delay is
    ``initial`` — a rare crash is retried quickly, a crash loop is slowed down.
    """

    initial: float = 1.0
    cap: float = 60.0
    reset_after: float = 60.0
    factor: float = 2.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1 = the first)."""
        return min(self.cap, self.initial * self.factor ** min(max(0, failures - 1), 64))


@dataclass
class Health:
    """One component as the status page shows it; times are UTC ISO-8601, exit codes as Popen's (-N: signal N).

    ``state``: ``starting`` (start-up, waiting for ready), ``running``, ``restarting`` (exited, next attempt at
    ``next_restart_at``) or ``failed`` (not ready at start-up, or out of restarts). Fields starting with ``_`` are the
    supervisor's bookkeeping and are not published.
    """

    name: str
    log: str
    state: str = "starting"
    pid: int | None = None
    restarts: int = 0
    last_exit_code: int | None = None
    last_failure_at: str | None = None
    last_failure: str | None = None
    next_restart_at: str | None = None
    backoff_s: float | None = None
    _failures: int = 0  # consecutive failures: drives the backoff
    _started: float = 0.0  # time.monotonic() of the latest spawn
    _due: float | None = None  # time.monotonic() of the next attempt

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


def describe_exit(returncode: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL``, from a Popen return code."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def utc_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_status(path: Path, components: list[Health]) -> None:
    """Publish ``components`` to ``path`` atomically (temp file, then rename), naming this process as the writer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"supervisor_pid": os.getpid(), "components": [h.public() for h in components]},
                              indent=1))
    os.replace(tmp, path)


def read_components(path: Path) -> list[dict[str, Any]]:
    """The published components, or ``[]`` if there is no file or its writer is gone (left by a killed run)."""
    try:
        data = json.loads(path.read_text())
        os.kill(int(data["supervisor_pid"]), 0)
    except PermissionError:
        pass  # alive, owned by someone else
    except (FileNotFoundError, ProcessLookupError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return []
    components = data.get("components")
    return components if isinstance(components, list) else []
