"""Erase a deleted object's document from the RocksDB read model for good: the tombstone stays, old values go.

A deleted object's view already holds an empty document; what may still hold the old document is RocksDB's own
files (superseded values in SST files and the WAL until compaction). ``erase_view`` rewrites the tombstone without
a document, drops the object's gap report and compacts the store, so no file of the current generation keeps it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rocksdict import Rdict

from commands.errors import ArbiterError
from projections.db.store import GAP, current_generation, doc_key, options
from projections.db.view import ObjectView


class ReadModelBusy(ArbiterError):
    """The read model is open by its projection (RocksDB's LOCK): stop ``arbiter project db`` first."""

    code = "READ_MODEL_BUSY"


class ObjectNotDeleted(ArbiterError):
    """The object is live: delete it first (``DELETE /objects/{id}``), so no later command brings a document back."""

    code = "ERASE_NOT_DELETED"


def not_deleted(object_id: str, version: int) -> ObjectNotDeleted:
    return ObjectNotDeleted(f"object {object_id!r} is live (version {version}): delete it first (DELETE "
                            f"/objects/{object_id}, then wait for the DB projection), so no later command can bring "
                            "a document back; nothing was erased")


def open_primary(generation: Path) -> Rdict:
    """Open a read-model generation's primary, or raise ``ReadModelBusy`` when the projection holds it."""
    try:
        return Rdict(str(generation), options())
    except Exception as e:
        if "lock" in str(e).lower():
            raise ReadModelBusy(f"the read model {generation} is open by another process (the DB projection?): "
                                f"stop it first ({e})") from e
        raise


def erase_view(root: Path, object_id: str) -> ObjectView | None:
    """Erase ``object_id``'s document from the current generation; return its tombstone (None if unknown)."""
    generation = current_generation(root)
    if generation is None:
        return None
    db = open_primary(generation)
    try:
        raw = db.get(doc_key(object_id))
        if raw is None:
            return None
        view = ObjectView.from_bytes(raw)
        if not view.deleted:
            raise not_deleted(object_id, view.version)
        tombstone = replace(view, document={})
        db.put(doc_key(object_id), tombstone.to_bytes())
        db.delete(GAP + object_id.encode())
        db.flush(True)
        db.compact_range(None, None)  # superseded values leave the SST files; the flushed WAL is released
        return tombstone
    finally:
        db.close()
