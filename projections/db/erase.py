"""Erase a deleted object's documents from the RocksDB read model for good: the tombstone stays, old values go.

A deleted object's view already holds an empty document; what still holds its documents is its history (every
event that moved it, with the document or patch it carried: ``h`` keys, ``projections.db.indexes``) and RocksDB's
own files (superseded values in SST files and the WAL until compaction). ``erase_view`` deletes the object's whole
history (the history-size figure shrinks with it), rewrites the tombstone without a document and drops its gap
report in one write, and compacts, so no file keeps any of it. The access index of lists already has no row for a
deleted object; compaction removes the old rows' bytes too.

It does so in a new generation (a checkpoint of the current one), swapped in like a rebuild's: a reader (the API's
RocksDB secondary) that stayed open across the erasure would otherwise go on serving deleted keys it had replayed
from an earlier write-ahead log into its memtable (seen in tests/unit/test_erasure.py); a swap makes it reopen.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

from rocksdict import Checkpoint, Rdict, WriteBatch

from commands.errors import ArbiterError
from projections.db import indexes
from projections.db.store import DOC, GAP, current_generation, doc_key, new_generation, options, swap_in
from projections.db.view import ObjectView
from projections.rocks import prefixed


class ReadModelBusy(ArbiterError):
    """The read model is open by its projection (RocksDB's LOCK): stop ``arbiter project db`` first."""

    code = "READ_MODEL_BUSY"


class ObjectNotDeleted(ArbiterError):
    """The object is live: delete it first (``DELETE /objects/{id}``), so no later command brings a document back."""

    code = "ERASE_NOT_DELETED"


class ReadModelMissing(ArbiterError):
    """The read model is absent or holds no object: the wrong one (another backend, another ``ARBITER_VAR_DIR``) or
    one being rebuilt; an erasure from it would leave the real one's documents. Nothing was erased."""

    code = "ERASE_READ_MODEL_MISSING"


class ObjectNotProjected(ArbiterError):
    """The read model does not hold the object yet: the DB projection, run later, would bring its documents back."""

    code = "ERASE_NOT_PROJECTED"


def missing(where: str, why: str) -> ReadModelMissing:
    return ReadModelMissing(f"the read model {where} {why}: is it the deployment's read model (ARBITER_READ_MODEL, "
                            "ARBITER_VAR_DIR, ARBITER_POSTGRES_*)? nothing was erased")


def not_projected(object_id: str, where: str) -> ObjectNotProjected:
    return ObjectNotProjected(f"the read model {where} does not hold object {object_id!r}: run the DB projection "
                              "until it has projected the object's deletion, then erase again; nothing was erased")


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


def erase_view(root: Path, object_id: str) -> ObjectView:
    """Erase ``object_id``'s document and history: in a copy of the current generation, swapped in (readers
    reopen, as after a rebuild), the old generation deleted; return its tombstone.

    Refused (nothing changes) when there is no read model or it holds no object (``ReadModelMissing``), when it
    does not hold this one (``ObjectNotProjected``) and when the object is live (``ObjectNotDeleted``).
    """
    generation = current_generation(root)
    if generation is None:
        raise missing(str(root), "does not exist")
    db = open_primary(generation)  # held until the swap: no projection can write the old generation meanwhile
    try:
        raw = db.get(doc_key(object_id))
        if raw is None:
            if next(prefixed(db, DOC), None) is None:
                raise missing(str(generation), "holds no object")
            raise not_projected(object_id, str(generation))
        view = ObjectView.from_bytes(raw)
        if not view.deleted:
            raise not_deleted(object_id, view.version)
        fresh = new_generation(root)
        Checkpoint(db).create_checkpoint(str(fresh))  # hard links: cheap; the compaction below rewrites what changed
        try:
            tombstone = _erase(fresh, object_id, view)
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
        swap_in(root, fresh)
    finally:
        db.close()
    shutil.rmtree(generation, ignore_errors=True)
    return tombstone


def _erase(generation: Path, object_id: str, view: ObjectView) -> ObjectView:
    db = Rdict(str(generation), options())
    try:
        tombstone = replace(view, document={})
        wb = WriteBatch(raw_mode=True)
        wb.put(doc_key(object_id), tombstone.to_bytes())
        wb.delete(GAP + object_id.encode())
        entries = indexes.read_history(db, object_id)
        if entries:
            size = indexes.history_size(db)
            for entry in entries:
                wb.delete(indexes.history_key(object_id, entry.version))
            size = {"events": max(0, size["events"] - len(entries)),
                    "bytes": max(0, size["bytes"] - sum(len(e.data) for e in entries))}
            wb.put(indexes.HISTORY_SIZE, json.dumps(size).encode())
        db.write(wb)
        db.flush(True)
        db.compact_range(None, None)  # superseded values leave the SST files; the flushed WAL is released
        return tombstone
    finally:
        db.close()
