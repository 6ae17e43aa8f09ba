"""Observe the validator: a log line per new micro-batch (at most one a second) and the latest progress as JSON."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.settings import Settings

log = logging.getLogger("arbiter.validator")
PROGRESS_FILE = "validator-progress.json"
POLL_S = 1.0  # how often the driver reads the newest progress
#: While its query is active, the watch touches the progress file this often, idle or not: the file's age is the
#: driver's heartbeat, which a container healthcheck reads (app/status/liveness.py), batches or none.
HEARTBEAT_S = 10.0
STATE_KEY = "rocksdbState"  # the rocksdb backend's summed shard figures, added to the progress file

StateSource = Callable[[], dict[str, int] | None]
# Per progress file, where the watch publishing to it takes the state figures Spark's progress lacks (the rocksdb
# backend's shard servers). Keyed by path because app.validator.rocks.query builds its QueryWatch without settings.
_state_sources: dict[Path, StateSource] = {}


def add_state_source(path: Path, source: StateSource) -> None:
    """Have the watch that publishes to ``path`` add ``source()``'s figures to each progress it publishes."""
    _state_sources[path] = source


def progress_path(settings: Settings) -> Path:
    """Return ``<var_dir>/status/validator-progress.json``, the file the API status page reads."""
    return settings.path(settings.var_dir) / "status" / PROGRESS_FILE


def add_state(path: Path | None, progress: dict[str, Any]) -> dict[str, Any]:
    """Add the figures of the state source registered for ``path`` (if any, and if it has some) to ``progress``."""
    source = _state_sources.get(path) if path is not None else None
    state = source() if source is not None else None
    if state is not None:
        progress[STATE_KEY] = state
    return progress


def spark_state(progress: dict[str, Any]) -> dict[str, int] | None:
    """Return the reference backend's state figures from Spark's state operators, or None when there are none."""
    ops = progress.get("stateOperators") or []
    if not ops:
        return None
    return {"state_rows": sum(int(o.get("numRowsTotal", 0)) for o in ops),
            "state_memory_bytes": sum(int(o.get("memoryUsedBytes", 0)) for o in ops),
            "ttl_evictions": sum(int((o.get("customMetrics") or {}).get("numValuesRemovedDueToTTLExpiry", 0))
                                 for o in ops)}


def state_line(progress: dict[str, Any]) -> str:
    """Return the state part of the progress line: Spark's operators, else the shard servers', else ``unknown``."""
    spark = spark_state(progress)
    if spark is not None:
        return (f"state_rows={spark['state_rows']} state_memory_bytes={spark['state_memory_bytes']} "
                f"ttl_evictions={spark['ttl_evictions']}")
    rocks = progress.get(STATE_KEY)
    if not rocks:
        return "state=unknown"  # never a zero that only means "not measured"
    memory = (f"{rocks['block_cache_usage_bytes']}/{rocks['block_cache_limit_bytes']}" if rocks["servers_live"]
              else "unknown")
    return (f"state_rows={rocks['rows_estimate']} state_sst_bytes={rocks['live_sst_bytes']} "
            f"state_memory_bytes={memory} ttl_evictions_total={rocks['ttl_evictions']} "
            f"core_records_total={rocks.get('core_records', 0)}/{rocks.get('records', 0)}")


def summary(progress: dict[str, Any]) -> str:
    """Return one line for a progress dict: batch, rows, rows/s, duration, then the state figures."""
    rows = int(progress.get("numInputRows", 0))
    rate = float(progress.get("processedRowsPerSecond", 0.0) or 0.0)
    duration = int((progress.get("durationMs") or {}).get("triggerExecution", 0))
    return (f"batch={progress.get('batchId')} input_rows={rows} rows_per_s={rate:.0f} duration_ms={duration} "
            f"{state_line(progress)}")


def write_progress(path: Path, progress: dict[str, Any]) -> None:
    """Write ``progress`` to ``path`` atomically (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(progress, sort_keys=True))
    os.replace(tmp, path)


class QueryWatch:
    """Follow one running query from a driver thread: log and publish its newest progress, run ``on_end`` once it ends.

    A polling thread, not a ``StreamingQueryListener``: a Python listener is called back through Py4J for every
    micro-batch and every idle trigger, and PySpark rebuilds each event from the JVM object with dozens of
    reflective Py4J calls. With two such listeners that was ~half of the driver JVM's CPU at 100 commands/s
    (JFR, docs/benchmarks.md, fourth pass). Polling ``lastProgress`` costs two Py4J calls a second, idle or not.
    """

    def __init__(self, query: Any, path: Path | None, on_end: Callable[[], None] | None = None,  # noqa: ANN401
                 interval_s: float = POLL_S) -> None:
        self.query = query
        self.path = path
        self.on_end = on_end
        self.interval_s = interval_s
        self._last = -1
        self._beat_at = 0.0
        self._stop = threading.Event()
        self._end_lock = threading.Lock()
        self.name = query.name  # read once: after the session stops, every call on the query raises
        self._thread = threading.Thread(target=self._run, name=f"progress-{self.name}", daemon=True)
        self._thread.start()

    def publish(self) -> None:
        """Log and write the query's newest progress if it is a batch not published yet."""
        last = self.query.lastProgress
        if last is None:
            return
        progress = json.loads(last.json)
        batch = int(progress.get("batchId", -1))
        if batch <= self._last:
            return
        skipped = batch - self._last - 1 if self._last >= 0 else 0
        self._last = batch
        add_state(self.path, progress)
        log.info("%s %s%s", progress.get("name"), summary(progress),
                 f" (+{skipped} batches since the previous line)" if skipped > 0 else "")
        if self.path is None:
            return
        try:
            write_progress(self.path, progress)
        except OSError as e:  # the status page is a convenience; never stop the stream for it
            log.warning("cannot write %s: %s", self.path, e)

    def _beat(self) -> None:
        """Touch the published progress file if ``HEARTBEAT_S`` passed since the last touch (see ``HEARTBEAT_S``)."""
        now = time.monotonic()
        if self.path is None or now - self._beat_at < HEARTBEAT_S:
            return
        self._beat_at = now
        try:
            os.utime(self.path)
        except FileNotFoundError:
            pass  # nothing published yet: the first progress writes it
        except OSError as e:
            log.warning("cannot touch %s: %s", self.path, e)

    def end(self) -> None:
        """Run ``on_end`` (once, from whichever thread sees the end first)."""
        with self._end_lock:
            on_end, self.on_end = self.on_end, None
        if on_end is not None:
            on_end()

    def stop(self) -> None:
        """Stop following the query (``on_end`` is not run)."""
        self._stop.set()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                active = self.query.isActive
                self.publish()
                if not active:
                    break
                self._beat()
        except Exception as e:  # noqa: BLE001 - the session is gone (stopped): nothing left to follow
            log.debug("progress of %s no longer readable: %s", self.name, e)
        finally:
            if not self._stop.is_set():
                self.end()
