"""The audit trail read by (principal, command id): the decisions of one principal's command, after any restart."""

from __future__ import annotations

import logging
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple, cast

from rocksdict import Rdict

from commands import Event, Rejection
from projections.audit import store
from projections.audit.chain import command_prefix, object_prefix, rejection_prefix, unpack_entry
from projections.rocks import close_secondary
from schemas import codec
from schemas.wire import DecodeError

log = logging.getLogger(__name__)


class Decision(NamedTuple):
    """One audited decision of a command, and where it is on its topic."""

    outcome: Event | Rejection
    topic: str
    partition: int
    offset: int


class OwnRejections(NamedTuple):
    """One window of a principal's rejections about an object: at most the cap, and whether more were left."""

    rejections: list[Rejection]
    truncated: bool


class AuditOutcomes:
    """A long-lived read-only view of the audit store (a RocksDB secondary), caught up at most every ``refresh_s``.

    Opened lazily: the API may start before the audit projection created its store. Safe to call from several
    threads (the API reads it on its threadpool): opening and catching up are serialised, reads are RocksDB's.
    ``scanned`` counts the index entries read by ``rejections`` (what its cap bounds).
    """

    def __init__(self, path: Path, *, refresh_s: float = 0.05) -> None:
        self.path = path
        self.refresh_s = refresh_s
        self._db: Rdict | None = None
        self._secondary: Path | None = None
        self._last = 0.0
        self._lock = threading.Lock()
        self.scanned = 0

    def _db_now(self) -> Rdict | None:
        with self._lock:
            return self._db_locked()

    def _db_locked(self) -> Rdict | None:
        if self._db is None:
            if not (self.path / "CURRENT").exists():
                return None
            self._secondary = Path(tempfile.mkdtemp(prefix="audit-outcomes-"))
            self._db = store.open_reader(self.path, self._secondary)
            self._last = time.monotonic()
        elif time.monotonic() - self._last >= self.refresh_s:
            self._db.try_catch_up_with_primary()
            self._last = time.monotonic()
        return self._db

    def decisions(self, principal: str, command_id: str) -> list[Decision]:
        """Return every audited decision of ``principal``'s command ``command_id`` (none for another principal's)."""
        db = self._db_now()
        if db is None:
            return []
        out: list[Decision] = []
        prefix = command_prefix(principal, command_id)
        for ek, raw in store.indexed(db, prefix):
            try:
                _, entry = unpack_entry(ek, raw)
                if entry.erased is not None:
                    continue  # erased on purpose (arbiter erase): nothing left to answer with
                outcome = codec.decode_outcome(entry.value or b"")
            except (ValueError, DecodeError) as e:  # the chain's own checks (arbiter audit verify) report it
                log.warning("audit outcomes: entry %s unreadable: %s", ek.hex(), e)
                continue
            # the index is keyed by what the record says: hold it to the asker anyway
            if outcome.principal == principal and outcome.command_id == command_id:
                out.append(Decision(outcome, entry.topic, entry.partition, entry.offset))
        return out

    def latest_event(self, object_id: str, events_topic: str) -> Event | None:
        """Return the newest audited event of ``object_id`` on ``events_topic`` (its highest partition's last, for an
        object moved by a rescale), or None: one backward seek in the by-object index, no scan.

        What the API's advisory pre-check of a patch learns the object's type and owner from (both immutable).
        """
        db = self._db_now()
        if db is None:
            return None
        index = object_prefix(object_id)
        prefix = index + b"r" + events_topic.encode() + b"\x00"
        last = next(iter(db.keys(backwards=True, from_key=prefix + b"\xff" * 13)), None)  # past every partition, seq
        if last is None or not cast(bytes, last).startswith(prefix):
            return None
        ek = cast(bytes, last)[len(index):]
        raw = db.get(ek)
        if raw is None:
            return None
        try:
            _, entry = unpack_entry(ek, raw)
            if entry.erased is not None:
                return None  # erased on purpose (arbiter erase)
            outcome = codec.decode_outcome(entry.value or b"")
        except (ValueError, DecodeError) as e:
            log.warning("audit outcomes: entry %s unreadable: %s", ek.hex(), e)
            return None
        # the index is keyed by what the record says: hold it to the asker anyway
        return outcome if isinstance(outcome, Event) and outcome.object_id == object_id else None

    def rejections(self, object_id: str, principal: str, after_version: int = 0, before_version: int | None = None,
                   *, limit: int) -> OwnRejections:
        """Return the rejections of ``principal``'s commands about ``object_id`` made at an object version in
        [``after_version``, ``before_version``), by version then audit order: at most ``limit`` read, through the
        by-(principal, object) index, so no one else's rejection is read at all (``scanned`` counts the reads)."""
        db = self._db_now()
        if db is None:
            return OwnRejections([], False)
        prefix = rejection_prefix(principal, object_id)
        out: list[Rejection] = []
        reads = 0
        for k, _ in db.items(from_key=prefix + struct.pack(">Q", max(after_version, 0))):
            key = cast(bytes, k)
            if not key.startswith(prefix):
                break
            (version,) = struct.unpack_from(">Q", key, len(prefix))
            if before_version is not None and version >= before_version:
                break
            if reads >= limit:  # the cap bounds the entries read, whatever they turn out to be
                return OwnRejections(out, True)
            reads += 1
            self.scanned += 1
            ek = key[len(prefix) + 8:]
            raw = db.get(ek)
            if raw is None:
                continue
            try:
                _, entry = unpack_entry(ek, raw)
                if entry.erased is not None:
                    continue  # erased on purpose (arbiter erase)
                outcome = codec.decode_outcome(entry.value or b"")
            except (ValueError, DecodeError) as e:
                log.warning("audit outcomes: entry %s unreadable: %s", ek.hex(), e)
                continue
            # the index is keyed by what the record says: hold it to the asker anyway
            if isinstance(outcome, Rejection) and outcome.principal == principal and outcome.object_id == object_id:
                out.append(outcome)
        return OwnRejections(out, False)

    def close(self) -> None:
        with self._lock:
            close_secondary(self._db, self._secondary)
            self._db, self._secondary = None, None
