"""The log projection: one JSON line per decision, to stdout or a size-rotated file; offsets committed to Kafka after.

At-least-once: lines are written before the batch's offsets are committed, so a crash may repeat the last batch's
lines (each carries topic, partition and offset, so a reader can drop repeats) but never loses one.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from commands import Event
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


class LogProjection(Projection):
    """Write decision lines to ``stream`` (default stdout) or to ``path``, rotated at ``max_bytes``."""

    name = "log"
    stores_offsets = False

    def __init__(self, path: Path | None = None, *, max_bytes: int = 64 * 1024 * 1024, backups: int = 5,
                 stream: TextIO | None = None, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.clock = clock
        self._handler: logging.Handler | None = None
        self._stream = stream or sys.stdout
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handler = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups,
                                                                 encoding="utf-8")
            self._handler.setFormatter(logging.Formatter("%(message)s"))
        self.lines = 0

    def apply(self, items: Sequence[Item]) -> None:
        now = self.clock()
        for it in items:
            text = json.dumps(decision_line(it, now), separators=(",", ":"), ensure_ascii=False)
            if self._handler is not None:
                self._handler.emit(logging.makeLogRecord({"msg": text}))
            else:
                self._stream.write(text + "\n")
            self.lines += 1
        if self._handler is None:
            self._stream.flush()

    def close(self) -> None:
        if self._handler is not None:
            self._handler.close()
