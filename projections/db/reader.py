"""Read the read model from another process (the API) while the DB projection writes it.

Each ``ReadModel`` is a RocksDB *secondary* instance of the current generation with its own small directory for
its info log. It sees the primary's writes (WAL included) after ``try_catch_up_with_primary``, which ``get`` calls
at most every ``refresh_s`` seconds, so a read lags the projection by at most that much beyond the projection's own
lag. A rebuild swaps ``current``; the reader notices the new target on its next refresh and reopens.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rocksdict import AccessType, Rdict

from projections.db import indexes
from projections.db.history import HistoryEntry
from projections.db.lists import Page, Role
from projections.db.port import TP
from projections.db.store import current_generation, doc_key, iter_gaps, iter_offsets, iter_views, options
from projections.db.view import ObjectView, StoredView
from projections.rocks import close_secondary

log = logging.getLogger(__name__)


class ReadModel:
    """Read-only access to ``<root>/current`` for any number of processes; one instance per thread."""

    def __init__(self, root: Path, *, refresh_s: float = 0.05) -> None:
        self.root = root
        self.refresh_s = refresh_s
        self._db: Rdict | None = None
        self._gen: Path | None = None
        self._secondary: Path | None = None
        self._last = 0.0

    def _open(self) -> Rdict | None:
        gen = current_generation(self.root)
        if gen is None:
            return None
        if self._db is not None and gen == self._gen:
            return self._db
        self.close()
        readers = self.root / "readers"  # a killed reader leaves its (tiny) directory here; safe to delete
        readers.mkdir(exist_ok=True)
        self._secondary = Path(tempfile.mkdtemp(prefix="secondary-", dir=readers))
        self._db = Rdict(str(gen), options(), access_type=AccessType.secondary(str(self._secondary)))
        self._gen, self._last = gen, time.monotonic()
        return self._db

    def refresh(self) -> None:
        """Catch up with the projection now (and follow a rebuild swap)."""
        db = self._open()
        if db is not None:
            try:
                db.try_catch_up_with_primary()
            except Exception:  # noqa: BLE001 - a swapped-out generation vanishing under us; reopen next time
                log.warning("read model: catch-up failed on %s, reopening", self._gen, exc_info=True)
                self.close()
        self._last = time.monotonic()

    def _db_now(self) -> Rdict | None:
        if self._db is None or time.monotonic() - self._last >= self.refresh_s:
            self.refresh()
        return self._db

    def get(self, object_id: str) -> ObjectView | None:
        """Return the object's view (deleted objects included, with ``deleted=True``), or None if never created."""
        stored = self.lookup(object_id)
        return stored.view() if stored is not None else None

    def lookup(self, object_id: str) -> StoredView | None:
        """Like ``get``, but the document is decoded only when read: check access first (the API does)."""
        db = self._db_now()
        raw = db.get(doc_key(object_id)) if db is not None else None
        return StoredView.from_bytes(raw) if raw is not None else None

    def views(self) -> Iterator[tuple[str, ObjectView]]:
        db = self._db_now()
        if db is not None:
            yield from iter_views(db)

    def gaps(self) -> dict[str, str]:
        """Return objects whose events had a gap or could not be applied (they need attention or a rebuild)."""
        db = self._db_now()
        return iter_gaps(db) if db is not None else {}

    def offsets(self) -> dict[TP, int]:
        """Return the projection's next offset per partition, stored in the batch with the documents it read."""
        db = self._db_now()
        return iter_offsets(db) if db is not None else {}

    def history(self, object_id: str, after: int = 0, limit: int | None = None,
                up_to: int | None = None) -> list[HistoryEntry]:
        """Return the object's history entries with ``after < version <= up_to``, oldest first, at most ``limit``."""
        db = self._db_now()
        return indexes.read_history(db, object_id, after, limit, up_to) if db is not None else []

    def page(self, ranges: list[tuple[str, Role]], since_us: int, after: tuple[int, str] | None,
             limit: int) -> Page:
        """Return one page of the access index over ``ranges`` (``projections.db.lists``), each object once."""
        db = self._db_now()
        return indexes.read_page(db, ranges, since_us, after, limit) if db is not None else Page([], False)

    def history_size(self) -> dict[str, int]:
        """Return the history's size as the projection last wrote it: ``events`` and ``bytes``."""
        db = self._db_now()
        return indexes.history_size(db) if db is not None else {"events": 0, "bytes": 0}

    def ready(self) -> bool:
        """Return True once the projection has created the first generation."""
        return current_generation(self.root) is not None

    def close(self) -> None:
        close_secondary(self._db, self._secondary)
        self._db, self._secondary = None, None

    def __enter__(self) -> ReadModel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
