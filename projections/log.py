"""The log projection: one JSON line per decision, to stdout or a size-rotated file; offsets committed to Kafka after.

At-least-once: a batch's lines are written, flushed and (with ``sync``) fsynced before ``apply`` returns, and the
runner commits the batch's offsets only after that, so a crash may repeat the last batch's lines (each carries
topic, partition and offset, so a reader can drop repeats) but never loses one. A write that fails (a full disk, an
I/O error) raises out of ``apply``, so that batch is not committed: ``logging``'s handlers would print the error
and go on, which is why the file handler here re-raises instead.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import stat
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from commands import Event
from projections.durable import fsync_path
from projections.runner import Item, Projection


def decision_line(item: Item, now: datetime) -> dict[str, Any]:
    """Return the log record of one decision; latency is ``now`` minus the command's issued_at."""
    rec, out = item.record, item.outcome
    line: dict[str, Any] = {"ts": now.isoformat(), "topic": rec.topic, "partition": rec.partition, "offset": rec.offset}
    if out is None:
        line.update(outcome="UNDECODABLE", reason=item.error, object_id=rec.key.decode("utf-8", "replace") if rec.key else None)
        return line
    line.update(command_id=out.command_id, object_id=out.object_id, principal=out.principal)
    if isinstance(out, Event):
        line.update(outcome="ACCEPTED", event=out.type.value, version=out.version, reason=None)
    else:
        line.update(outcome="REJECTED", reason=out.reason.value, version=out.current_version, message=out.message)
    line["latency_ms"] = round((now - out.occurred_at).total_seconds() * 1000, 1) if out.occurred_at else None
    return line


def _sync_file(stream: TextIO) -> None:
    """fsync ``stream``'s file if it is a regular file (a pipe or a terminal cannot be synced)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO and the like: nothing on disk
        return
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.fsync(fd)


class _FileHandler(logging.handlers.RotatingFileHandler):
    """A rotating file whose write errors raise, whose rotated-out file is fsynced first (with ``sync``)."""

    def __init__(self, path: Path, *, max_bytes: int, backups: int, sync: bool) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.setFormatter(logging.Formatter("%(message)s"))
        self.sync = sync
        self.rotated = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        """Raise the error ``emit`` caught: logging's default prints it and carries on, losing the line."""
        error = sys.exc_info()[1]
        raise error if error is not None else OSError(f"writing {self.baseFilename} failed")

    def doRollover(self) -> None:  # noqa: N802 - logging's name
        if self.sync and self.stream is not None:
            self.stream.flush()
            _sync_file(self.stream)
        super().doRollover()
        self.rotated = True

    def sync_batch(self) -> None:
        """Make every line written so far durable: the file's data, and after a rotation the directory's names."""
        if self.stream is None:
            return
        self.stream.flush()
        if self.sync:
            _sync_file(self.stream)
            if self.rotated:
                fsync_path(Path(self.baseFilename).parent)
        self.rotated = False


class LogProjection(Projection):
    """Write decision lines to ``stream`` (default stdout) or to ``path``, rotated at ``max_bytes``; with ``sync``
    (``ARBITER_PROJECTION_SYNC_WRITES``) a batch's lines are fsynced before its offsets are committed."""

    name = "log"
    stores_offsets = False

    def __init__(self, path: Path | None = None, *, max_bytes: int = 64 * 1024 * 1024, backups: int = 5,
                 stream: TextIO | None = None, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 sync: bool = True) -> None:
        self.clock = clock
        self.sync = sync
        self._handler: _FileHandler | None = None
        self._stream = stream or sys.stdout
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handler = _FileHandler(path, max_bytes=max_bytes, backups=backups, sync=sync)
        self.lines = 0

    def apply(self, items: Sequence[Item]) -> None:
        """Write, flush and (with ``sync``) fsync the batch's lines; raise ``OSError`` if any of that fails."""
        now = self.clock()
        for it in items:
            text = json.dumps(decision_line(it, now), separators=(",", ":"), ensure_ascii=False)
            if self._handler is not None:
                self._handler.emit(logging.makeLogRecord({"msg": text}))
            else:
                self._stream.write(text + "\n")
            self.lines += 1
        if self._handler is not None:
            self._handler.sync_batch()
        else:
            self._stream.flush()
            if self.sync:
                _sync_file(self._stream)

    def close(self) -> None:
        if self._handler is not None:
            self._handler.close()
