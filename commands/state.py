"""The compact per-object state the validator keeps (never the document) and the limits that bound it.

Deduplication: ``recent`` holds the last ``Limits.max_recent`` *accepted* command ids (FIFO, oldest
first) with the outcome "ACCEPTED", the version they produced and their ``issued_at``. TTL is in event
time and pure: an entry whose ``at`` is more than ``Limits.dedup_ttl`` before the incoming command's
``issued_at`` no longer matches, and expired entries are pruned on the next accepted write. With
``dedup_ttl=None`` only the FIFO bound applies. Rejected commands are never recorded (see ``decide``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

ACCEPTED = "ACCEPTED"


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on state size and payloads; ``dedup_ttl`` is event time relative to the new command."""

    max_editors: int = 32
    max_recent: int = 16
    max_document_bytes: int = 10 * 1024 * 1024
    dedup_ttl: timedelta | None = timedelta(hours=24)


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class RecentCommand:
    """One remembered command: its id, its outcome ("ACCEPTED"), the version it produced, its issued_at."""

    command_id: str
    outcome: str
    version: int
    at: datetime


@dataclass(frozen=True, slots=True)
class ObjectState:
    """What the validator knows about one object: a few hundred bytes, whatever the document's size.

    ``document_size`` is the UTF-8 size of the document as created; the validator never sees the merged
    document, so updates leave it unchanged (the DB projection knows the true size).
    """

    exists: bool
    deleted: bool
    version: int
    owner: str
    editors: tuple[str, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None
    deleted_at: datetime | None = None
    document_size: int = 0
    recent: tuple[RecentCommand, ...] = ()

    def find_recent(self, command_id: str, now: datetime, ttl: timedelta | None) -> RecentCommand | None:
        """Return the unexpired entry for ``command_id`` as seen by a command issued at ``now``."""
        for entry in self.recent:
            if entry.command_id == command_id and (ttl is None or now - entry.at <= ttl):
                return entry
        return None


def remember(recent: tuple[RecentCommand, ...], entry: RecentCommand, limits: Limits) -> tuple[RecentCommand, ...]:
    """Return ``recent`` without entries expired at ``entry.at``, with ``entry`` appended, capped FIFO."""
    ttl = limits.dedup_ttl
    if ttl is None:
        kept = (*recent, entry)
    else:
        try:
            cutoff = entry.at - ttl  # entry.at - r.at <= ttl, with one subtraction instead of one per entry
        except OverflowError:  # before datetime.min + ttl: nothing can be older than ttl
            kept = (*recent, entry)
        else:
            kept = (*[r for r in recent if r.at >= cutoff], entry)
    if len(kept) > limits.max_recent:
        kept = kept[len(kept) - limits.max_recent:]
    return kept
