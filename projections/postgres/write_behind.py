"""Write-behind for the PostgreSQL writer: one batch's transaction in flight on a background thread, later batches
merged into the next one meanwhile.

The projection folds batch N+1 (Python, this process) while the server writes batch N (another process, another
core), and when the server falls behind, the batches that arrived meanwhile go in as one transaction: an object
changed in several of them is written once, and there is one commit. Each transaction still holds documents and
the offsets after them together, so a crash loses whole batches (replayed from Kafka), never half of one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from projections.db.port import TP, HistoryRow
from projections.db.view import ObjectView


@dataclass
class Batch:
    """Views, next offsets, gap reports and history entries of one or more consecutive runner batches."""

    views: dict[str, ObjectView] = field(default_factory=dict)
    offsets: dict[TP, int] = field(default_factory=dict)
    gaps: dict[str, str] = field(default_factory=dict)
    history: list[HistoryRow] = field(default_factory=list)

    def merge(self, views: dict[str, ObjectView], offsets: dict[TP, int], gaps: dict[str, str],
              history: list[HistoryRow] | None = None) -> None:
        self.views.update(views)  # later batches hold the later view of an object
        self.offsets.update(offsets)
        self.gaps.update(gaps)
        self.history.extend(history or ())  # every event that moved a view is history, not only the last

    def __bool__(self) -> bool:
        return bool(self.views or self.offsets or self.gaps or self.history)


class WriteBehind:
    """Run ``write(batch)`` on one background thread, one at a time, in order; errors come out of the next call."""

    def __init__(self, write: Callable[[Batch], None], *, max_rows: int, name: str) -> None:
        self._write = write
        self.max_rows = max_rows
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._running: Future[None] | None = None
        self._running_ids: dict[str, ObjectView] = {}
        self._next = Batch()

    def put(self, views: dict[str, ObjectView], offsets: dict[TP, int], gaps: dict[str, str],
            history: list[HistoryRow] | None = None) -> None:
        """Queue a batch; start it now if the writer is free, else merge it into the next (waiting only when that
        one has grown to ``max_rows`` views). Raise the error of a batch that failed since the last call."""
        self._collect(block=False)
        self._next.merge(views, offsets, gaps, history)
        self._start(block=len(self._next.views) >= self.max_rows)

    def poll(self) -> None:
        """Start merged batches if the writer became free; raise the error of a batch that failed."""
        self._collect(block=False)
        self._start(block=False)

    def holds(self, object_ids: Iterable[str]) -> bool:
        """Return True if a batch not yet committed writes any of ``object_ids``."""
        pending = (self._running_ids, self._next.views)
        return any(i in p for i in object_ids for p in pending if p)

    def flush(self) -> None:
        """Wait until everything queued is committed; raise the first error."""
        while self._running is not None or self._next:
            self._collect(block=True)
            self._start(block=False)

    def discard(self) -> None:
        """Drop what is queued and wait for the batch in flight, ignoring its outcome (the store was replaced)."""
        self._next = Batch()
        running, self._running, self._running_ids = self._running, None, {}
        if running is not None:
            running.exception()

    def close(self) -> None:
        """Flush, then stop the thread (also when the flush fails)."""
        try:
            self.flush()
        finally:
            self._executor.shutdown()

    def _collect(self, *, block: bool) -> None:
        running = self._running
        if running is None or (not block and not running.done()):
            return
        self._running, self._running_ids = None, {}
        try:
            running.result()
        except BaseException:
            self._next = Batch()  # folded on the same state as the failed batch: never written after it
            raise

    def _start(self, *, block: bool) -> None:
        if block:
            self._collect(block=True)
        if self._running is not None or not self._next:
            return
        batch, self._next = self._next, Batch()
        self._running, self._running_ids = self._executor.submit(self._write, batch), batch.views
