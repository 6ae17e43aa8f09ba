"""The one read-model interface: what the DB projection writes through, what readers read, how a rebuild swaps.

Two backends implement it: ``projections.db.store`` (RocksDB, the embedded default) and ``projections.postgres``
(PostgreSQL). ``tests/integration/test_projection_db.py`` runs one contract suite over both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from commands.errors import ArbiterError
from projections.db.history import HistoryEntry
from projections.db.lists import Page, Role
from projections.db.view import ObjectView

TP = tuple[str, int]
#: One history entry to store: (object id, version, ``projections.db.history.entry_bytes``).
HistoryRow = tuple[str, int, bytes]


class ReadModelSwapped(ArbiterError):
    """A rebuild swapped the read model in while a batch was being written; the batch was not written."""

    code = "READ_MODEL_SWAPPED"


class ReadModelUnavailable(ArbiterError):
    """The read model's store cannot be reached (a database down); the API answers 503."""

    code = "READ_MODEL_UNAVAILABLE"


class ReadModelWriter(Protocol):
    """One store the DB projection writes: documents, next offsets and gap reports, always together."""

    def get_many(self, object_ids: Iterable[str]) -> dict[str, ObjectView | None]:
        """Return the stored view of each id (None where there is none)."""
        ...

    def offsets(self) -> dict[TP, int]:
        """Return the next offset to read per partition, as last written with the documents."""
        ...

    def write(self, views: dict[str, ObjectView], offsets: dict[TP, int], gaps: dict[str, str],
              history: list[HistoryRow] | None = None,
              previous: dict[str, ObjectView | None] | None = None) -> None:
        """Write documents, offsets, gap reports, history entries and the access index of lists atomically; raise
        ``ReadModelSwapped`` if a rebuild took over. ``previous`` holds the stored view of each id in ``views`` when
        the caller knows it (the projection does), so the backend need not read it again to update its index.

        A backend may write in the background and return at once: it then waits for that write at the next call
        to any method and raises its error there, so a batch is never written before the one before it.
        """
        ...

    def successor(self) -> ReadModelWriter | None:
        """If a rebuild swapped another store in, close this one and return that one; else None."""
        ...

    def close(self) -> None:
        """Make what was written durable and release the store."""
        ...


class ReadModelReader(Protocol):
    """Read-only access for the API and tools; sees whole batches only, and follows a rebuild's swap."""

    def get(self, object_id: str) -> ObjectView | None:
        """Return the object's view (deleted objects included), or None if it was never created."""
        ...

    def views(self) -> Iterator[tuple[str, ObjectView]]:
        """Yield every (object_id, view), in id order."""
        ...

    def gaps(self) -> dict[str, str]:
        """Return objects whose events had a gap or could not be applied."""
        ...

    def offsets(self) -> dict[TP, int]:
        """Return the next offset per partition stored with the documents this reader sees (read-your-writes)."""
        ...

    def history(self, object_id: str, after: int = 0, limit: int | None = None,
                up_to: int | None = None) -> list[HistoryEntry]:
        """Return the object's history entries with ``after < version <= up_to``, oldest first, at most ``limit``."""
        ...

    def page(self, ranges: list[tuple[str, Role]], since_us: int, after: tuple[int, str] | None,
             limit: int) -> Page:
        """Return one page of the access index over ``ranges`` (``projections.db.lists``), each object once."""
        ...

    def history_size(self) -> dict[str, int]:
        """Return the history store's size: ``events`` (an estimate on PostgreSQL) and ``bytes``."""
        ...

    def ready(self) -> bool:
        """Return True once the projection has created the read model."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...


class RebuildTarget(Protocol):
    """Where a rebuild writes: a fresh store nobody reads, then swapped in atomically."""

    def fresh(self) -> ReadModelWriter:
        """Return a new, empty store, invisible to readers and to the live projection."""
        ...

    def swap_in(self) -> str:
        """Make the store ``fresh`` returned the current one in one atomic step; return its name."""
        ...
