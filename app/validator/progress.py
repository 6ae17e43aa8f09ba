"""Observe the validator: one log line per micro-batch and the latest progress as JSON for the status page."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from app.settings import Settings

log = logging.getLogger("arbiter.validator")
PROGRESS_FILE = "validator-progress.json"


def progress_path(settings: Settings) -> Path:
    """Return ``<var_dir>/status/validator-progress.json``, the file the API status page reads."""
    return settings.path(settings.var_dir) / "status" / PROGRESS_FILE


def summary(progress: dict[str, Any]) -> str:
    """Return one line for a progress dict: batch, rows, rows/s, duration, state rows and memory, TTL evictions."""
    ops = progress.get("stateOperators") or []
    state_rows = sum(int(o.get("numRowsTotal", 0)) for o in ops)
    state_mem = sum(int(o.get("memoryUsedBytes", 0)) for o in ops)
    evicted = sum(int((o.get("customMetrics") or {}).get("numValuesRemovedDueToTTLExpiry", 0)) for o in ops)
    rows = int(progress.get("numInputRows", 0))
    rate = float(progress.get("processedRowsPerSecond", 0.0) or 0.0)
    duration = int((progress.get("durationMs") or {}).get("triggerExecution", 0))
    return (f"batch={progress.get('batchId')} input_rows={rows} rows_per_s={rate:.0f} duration_ms={duration} "
            f"state_rows={state_rows} state_memory_bytes={state_mem} ttl_evictions={evicted}")


def write_progress(path: Path, progress: dict[str, Any]) -> None:
    """Write ``progress`` to ``path`` atomically (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(progress, sort_keys=True))
    os.replace(tmp, path)


class ProgressListener(StreamingQueryListener):
    """Log and publish the progress of the validator queries registered with ``watch`` (by query name)."""

    def __init__(self) -> None:
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()

    def watch(self, query_name: str, path: Path) -> None:
        with self._lock:
            self._paths[query_name] = path

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802, ANN401
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802, ANN401
        progress = json.loads(event.progress.json)
        with self._lock:
            path = self._paths.get(progress.get("name") or "")
        if path is None:
            return
        log.info("%s %s", progress.get("name"), summary(progress))
        try:
            write_progress(path, progress)
        except OSError as e:  # the status page is a convenience; never stop the stream for it
            log.warning("cannot write %s: %s", path, e)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802, ANN401
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802, ANN401
        pass


_listeners: dict[int, ProgressListener] = {}


def listener_for(spark) -> ProgressListener:  # noqa: ANN001
    """Return the session's one ProgressListener, registering it on first use."""
    key = id(spark._jsparkSession)
    if key not in _listeners:
        _listeners[key] = ProgressListener()
        spark.streams.addListener(_listeners[key])
    return _listeners[key]
