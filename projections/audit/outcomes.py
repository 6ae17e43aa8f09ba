"""The audit trail read by (principal, command id): the decisions of one principal's command, after any restart."""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from rocksdict import Rdict

from commands import Event, Rejection
from projections.audit import store
from projections.audit.chain import command_prefix, object_prefix, unpack_entry
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


class AuditOutcomes:
    """A long-lived read-only view of the audit store (a RocksDB secondary), caught up at most every ``refresh_s``.

    Opened lazily: the API may start before the audit projection created its store. One instance per thread.
    """

    def __init__(self, path: Path, *, refresh_s: float = 0.05) -> None:
        self.path = path
        self.refresh_s = refresh_s
        self._db: Rdict | None = None
        self._secondary: Path | None = None
        self._last = 0.0

    def _db_now(self) -> Rdict | None:
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

    def rejections(self, object_id: str, principal: str) -> list[Rejection]:
        """Return the rejections of ``principal``'s commands about ``object_id``, in audit order (no one else's)."""
        db = self._db_now()
        if db is None:
            return []
        out: list[Rejection] = []
        for ek, raw in store.indexed(db, object_prefix(object_id)):
            try:
                _, entry = unpack_entry(ek, raw)
                outcome = codec.decode_outcome(entry.value or b"")
            except (ValueError, DecodeError) as e:
                log.warning("audit outcomes: entry %s unreadable: %s", ek.hex(), e)
                continue
            if isinstance(outcome, Rejection) and outcome.principal == principal and outcome.object_id == object_id:
                out.append(outcome)
        return out

    def close(self) -> None:
        close_secondary(self._db, self._secondary)
        self._db, self._secondary = None, None
