"""The DB projection: events folded into the read model, offsets stored in the same atomic batch."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from commands import Event
from commands.json_text import id_problem
from projections.db.apply import Status, apply_event
from projections.db.history import entry_bytes, moved
from projections.db.port import TP, HistoryRow, ReadModelSwapped, ReadModelWriter
from projections.db.store import gap_detail
from projections.db.view import ObjectView
from projections.runner import Item, Projection

log = logging.getLogger(__name__)


@dataclass
class DbCounts:
    applied: int = 0
    stale: int = 0
    gaps: int = 0
    invalid: int = 0
    skipped: int = 0  # rejections and undecodable records: nothing to apply, offset still advances


class DbProjection(Projection):
    """Apply events to one read-model store (either backend); ``follow_swaps`` moves to a rebuild's store when it is
    swapped in (the live projection), off for the rebuild itself."""

    name = "db"
    stores_offsets = True

    def __init__(self, store: ReadModelWriter, *, follow_swaps: bool = True, cache_size: int = 50_000) -> None:
        # Parsed views of recently touched objects: this process is the store's only writer, so they stay exact.
        self._cache: OrderedDict[str, ObjectView] = OrderedDict()
        self.cache_size = cache_size
        self.follow_swaps = follow_swaps
        self.store = store
        self.counts = DbCounts()

    def figures(self) -> dict[str, int]:
        return asdict(self.counts)

    def start_offsets(self, partitions: Sequence[TP]) -> dict[TP, int]:
        stored = self.store.offsets()
        return {tp: stored[tp] for tp in partitions if tp in stored}

    def apply(self, items: Sequence[Item]) -> None:
        cache, counts = self._cache, self.counts
        views: dict[str, ObjectView | None] = {}
        missing: list[str] = []
        for it in items:
            ev = it.outcome
            if isinstance(ev, Event) and ev.object_id not in views:
                view = views[ev.object_id] = cache.get(ev.object_id)
                if view is None and "\x00" not in ev.object_id:  # such an id is refused below, never looked up
                    missing.append(ev.object_id)
        if missing:
            views.update(self.store.get_many(missing))
        previous = dict(views)  # as stored: the store replaces their access-index rows
        history: list[HistoryRow] = []
        changed: dict[str, ObjectView] = {}
        gaps: dict[str, str] = {}
        offsets: dict[TP, int] = {}
        applied = stale = skipped = 0
        for rec, ev, _ in items:
            offsets[(rec.topic, rec.partition)] = rec.offset + 1
            if not isinstance(ev, Event):
                skipped += 1
                continue
            key_problem = id_problem("object_id", ev.object_id)
            if key_problem is not None:  # no backend can key a view by it; only another producer can write one
                status, view, detail = Status.INVALID, None, key_problem
            else:
                before = views[ev.object_id]
                status, view, detail = apply_event(before, ev)
                if view is not None and view is not before:
                    views[ev.object_id] = changed[ev.object_id] = view
                if moved(before, view):  # exactly the events a fold of the history must make again
                    history.append((ev.object_id, ev.version, entry_bytes(ev)))
            if status is Status.APPLIED:
                applied += 1
            elif status is Status.STALE:
                stale += 1
            else:
                # Never papered over: what could land landed (roles, deletion), the view is marked quarantined or
                # stale so reads fail closed, and the report is kept in the store.
                if status is Status.GAP:
                    counts.gaps += 1
                else:
                    counts.invalid += 1
                log.error("db projection: %s for object %r at %s: %s (event %s %s v%d)", status.value,
                          ev.object_id, rec.where, detail, ev.event_id, ev.type.value, ev.version)
                gaps[ev.object_id.replace("\x00", "\\u0000")] = gap_detail(
                    status=status.value, detail=detail, topic=rec.topic, partition=rec.partition, offset=rec.offset,
                    version=ev.version)
        counts.applied += applied
        counts.stale += stale
        counts.skipped += skipped
        try:
            self.store.write(changed, offsets, gaps, history, previous)
        except ReadModelSwapped:
            # Not written: ``reseek`` (the runner calls it next) moves to the rebuilt store and its offsets.
            log.info("db projection: a rebuild was swapped in during this batch; it is read again from the new store")
            self._cache.clear()
            return
        # Only after the write: a failed batch leaves the cache as the store is.
        for object_id, view in views.items():
            if view is not None:
                cache[object_id] = view
                cache.move_to_end(object_id)
        while len(cache) > self.cache_size:
            cache.popitem(last=False)

    def restart_at(self, tp: TP, lost_from: int | None, resume_at: int, reason: str) -> None:
        """Store the operator's new position; objects whose events were lost become gaps (stale views) as their
        next events arrive."""
        log.warning("db projection: %s[%d] restarted at %d, offsets from %s never read: %s", tp[0], tp[1], resume_at,
                    lost_from, reason)
        self.store.write({}, {tp: resume_at}, {})

    def reseek(self) -> dict[TP, int] | None:
        if not self.follow_swaps:
            return None
        nxt = self.store.successor()
        if nxt is None:
            return None
        self._cache.clear()
        self.store = nxt
        return nxt.offsets()

    def handover(self) -> None:
        """Wait for the store's queued writes (``offsets`` does) and drop the cached views: while another instance
        held a partition, its objects' views changed without this one (``arbiter project db --group``)."""
        self.store.offsets()
        self._cache.clear()

    def close(self) -> None:
        self.store.close()
