"""Who may read an object at each event: roles folded from its events, seeded from the audit trail when unknown.

An event says what changed (a grant or revoke names its grantee) and who owns the object, not every role: the
roles *before* an event come from the object's earlier events. ``RolesBook`` keeps the roles of recently seen
objects and folds each new event into them (``commands.access.roles_after``); an object it does not hold is
seeded from the audit trail's by-object index (``AuditRoles``): its events at offsets below the event's, read
once the audit projection has stored that partition up to there. The audit trail keeps every decision for good,
so this does not depend on the events topic's retention.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

from rocksdict import Rdict

from commands import Event, EventType
from commands.access import Roles, roles_after
from commands.errors import ArbiterError
from projections.audit import store
from projections.audit.chain import chain_prefix, index_key, unpack_entry
from projections.rocks import close_secondary, prefixed
from schemas import codec
from schemas.wire import DecodeError

log = logging.getLogger(__name__)


class RolesUnknown(ArbiterError):
    """The roles before an event could not be learnt in time (the audit projection is behind or not running)."""

    code = "ROLES_UNKNOWN"


class RolesSource(Protocol):
    """Where the roles of an object before a given event are found."""

    def roles_before(self, object_id: str, topic: str, partition: int, offset: int) -> Roles | None: ...


class AuditRoles:
    """Roles from the audit store (a RocksDB secondary of ``path``), opened lazily; safe to share between threads."""

    def __init__(self, path: Path, *, wait_s: float, poll_s: float = 0.05) -> None:
        self.path = path
        self.wait_s = wait_s
        self.poll_s = poll_s
        self._db: Rdict | None = None
        self._secondary: Path | None = None
        self._lock = threading.Lock()
        self.seeded = 0

    def _open(self) -> Rdict | None:
        with self._lock:
            if self._db is None and (self.path / "CURRENT").exists():
                self._secondary = Path(tempfile.mkdtemp(prefix="audit-roles-"))
                self._db = store.open_reader(self.path, self._secondary)
            return self._db

    def _stored_to(self, db: Rdict, topic: str, partition: int) -> int:
        head = store.head_of(db, (topic, partition))
        return head.next_offset if head is not None else 0

    def _caught_up(self, topic: str, partition: int, offset: int) -> Rdict | None:
        """Return the store once it holds ``partition`` below ``offset``, None if it does not yet."""
        db = self._open()
        if db is None:
            return None
        with self._lock:  # one catch-up with the primary at a time; reads below run without the lock
            db.try_catch_up_with_primary()
        return db if self._stored_to(db, topic, partition) >= offset else None

    def roles_before(self, object_id: str, topic: str, partition: int, offset: int) -> Roles | None:
        """Return the roles on ``object_id`` after its events below ``offset`` (None: none); raise RolesUnknown.

        The wait for the audit projection holds no lock: one stream's catch-up waiting on a partition the audit
        trail has not stored yet never stalls another's lookup (or the live feed's)."""
        deadline = time.monotonic() + self.wait_s
        while (db := self._caught_up(topic, partition, offset)) is None:
            if time.monotonic() >= deadline:
                raise RolesUnknown(f"the audit trail has not stored {topic}[{partition}] up to offset {offset} "
                                   f"within {self.wait_s:g} s: the roles on {object_id!r} are unknown")
            time.sleep(self.poll_s)
        roles: Roles | None = None
        prefix = index_key(object_id, topic, partition, 0)[:-8]  # this object's entries of that partition
        chain = chain_prefix(topic, partition)
        for k, _ in prefixed(db, prefix):
            ek = chain + k[len(prefix):]  # the index key ends in the entry's seq
            raw = db.get(ek)
            if raw is None:
                continue
            try:
                _, entry = unpack_entry(ek, raw)
                if entry.offset < 0 or entry.offset >= offset:  # a restart entry, or at/after the event
                    continue
                outcome = codec.decode_outcome(entry.value or b"")
            except (ValueError, DecodeError) as e:
                raise RolesUnknown(f"an audited event of {object_id!r} is unreadable: {e}") from e
            if isinstance(outcome, Event) and outcome.object_id == object_id:
                roles = roles_after(roles, outcome)
        with self._lock:
            self.seeded += 1
        return roles

    def close(self) -> None:
        with self._lock:
            close_secondary(self._db, self._secondary)
            self._db, self._secondary = None, None


class RolesBook:
    """The roles of up to ``max_objects`` objects (least recently seen dropped first), each at its latest event.

    One book per reader of the topic (the process's live feed, each catch-up): it is not thread-safe.
    """

    def __init__(self, source: RolesSource, topic: str, max_objects: int = 100_000) -> None:
        self.source = source
        self.topic = topic
        self.max_objects = max_objects
        self._roles: OrderedDict[str, Roles] = OrderedDict()

    def __len__(self) -> int:
        return len(self._roles)

    def observe(self, event: Event, partition: int, offset: int) -> tuple[Roles | None, Roles]:
        """Return the roles before and after ``event`` (at ``offset`` of ``partition``); raise RolesUnknown."""
        oid = event.object_id
        before = self._roles.pop(oid, None)
        if event.type is EventType.CREATED:
            before = None
        elif before is None or before.version != event.version - 1:  # never seen, or events of it were not seen
            before = self.source.roles_before(oid, self.topic, partition, offset)
            if before is None:  # events of it, none of them stored: guessing "owner only" would hide events
                raise RolesUnknown(f"no earlier event of {oid!r} is in the audit trail, though {event.type.value} "
                                   f"at version {event.version} follows them")
        after = roles_after(before, event)
        self._roles[oid] = after
        if len(self._roles) > self.max_objects:
            self._roles.popitem(last=False)
        return before, after

    def follow(self, event: Event) -> None:
        """Fold ``event`` into roles already held (no seeding): keeps held roles current at no lookup's cost."""
        held = self._roles.get(event.object_id)
        if held is not None:
            if held.version == event.version - 1:
                self._roles[event.object_id] = roles_after(held, event)
            else:
                del self._roles[event.object_id]
