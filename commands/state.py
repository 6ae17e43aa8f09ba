"""The compact per-object state the validator keeps (never the document) and the limits that bound it.

Deduplication: ``recent`` holds the last ``Limits.max_recent`` *accepted* commands (FIFO, oldest first):
command id, the outcome "ACCEPTED", the version produced, ``issued_at``, the principal that sent it and
a fingerprint of the request (``commands.command.fingerprint``). A command id is an idempotency key of
*its principal*: an entry only ever matches a command of the same principal. Entries written before
principals were kept (state schema v1) have ``principal=None`` and match any principal that passes the
authorization check; their ``fingerprint`` is None and is not compared. TTL is in event
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
    max_readers: int = 64
    max_id_bytes: int = 256
    max_json_depth: int = 32


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class RecentCommand:
    """One remembered command: id, outcome ("ACCEPTED"), version produced, issued_at, principal, fingerprint."""

    command_id: str
    outcome: str
    version: int
    at: datetime
    principal: str | None = None
    fingerprint: int | None = None


@dataclass(frozen=True, slots=True)
class ObjectState:
    """What the validator knows about one object: a few hundred bytes, whatever the document's size.

    ``document_size`` is the UTF-8 size of the document as created; the validator never sees the merged
    document, so updates leave it unchanged (the DB projection knows the true size).

    ``object_type`` is the type named on create (None: untyped, no rules apply); ``tracked`` the canonical JSON
    text of the object's tracked fields, an object from JSON pointer to value with null values left out (None when
    nothing is tracked). Both are kept by ``commands.rules``; see there for the semantics.
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
    readers: tuple[str, ...] = ()
    object_type: str | None = None
    tracked: str | None = None

    def find_recent(self, command_id: str, now: datetime, ttl: timedelta | None,
                    principal: str | None = None) -> RecentCommand | None:
        """Return the unexpired entry for ``command_id`` of ``principal`` as seen by a command issued at ``now``.

        An entry with no principal (written by state schema v1) matches any principal.
        """
        for entry in self.recent:
            if entry.command_id == command_id and (entry.principal is None or entry.principal == principal) \
                    and (ttl is None or now - entry.at <= ttl):
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
