"""Erase one object's record values from the audit store, keeping every chain verifiable (issue 30).

Only a deleted object is erased, and the audit trail itself says whether it is: its by-object index must hold the
object's ``DELETED`` event (``deletion``), else ``DeletionNotAudited`` and nothing changes (issue 35: the read
model may be stopped, empty, another deployment's or behind). That event's value is kept: it carries no document
(ids, principal, owner, roles), as the read model's tombstone and the archive keep it, and it is what lets an
erasure be run again. Each other v2 entry of the object (found through the by-object index) keeps only the SHA-256
and length of its value, which is what its hash covers (``projections.audit.chain``), and each chain touched gets
an erasure entry naming the records erased: one atomic WriteBatch. RocksDB then compacts the store, so the dropped
values leave its SST files and WAL (``arbiter erase`` is run with the audit projection stopped: it needs the
store's primary).

Only decisions are erased: the control plane's own records (rules deploys' claims and placements, generation
records: ``projections.audit.deploys``) are indexed under ``arbiter:rules`` and ``arbiter:generation``, which a
user's object could be named before those ids were reserved (issue 47); they are kept whatever is erased.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import Rdict

from commands import Event, EventType
from commands.errors import ArbiterError
from projections.audit import store
from projections.audit.chain import (
    ENVELOPE_V2,
    ERASURE_OFFSET,
    GENESIS,
    Entry,
    Head,
    entry_key,
    erased,
    erasure_value,
    head_key,
    link,
    object_prefix,
    pack_entry,
    pack_head,
    unpack_entry,
)
from projections.audit.deploys import catalog_record
from schemas import codec
from schemas.generations import generation_record
from schemas.wire import DecodeError

TP = tuple[str, int]


class AuditStoreBusy(ArbiterError):
    """The audit store is open by its projection (RocksDB's LOCK): stop ``arbiter project audit`` first."""

    code = "AUDIT_STORE_BUSY"


class EraseRefused(ArbiterError):
    """The object's audit entries cannot be erased without breaking their chain (v1 entries); nothing changed."""

    code = "ERASE_REFUSED"


class DeletionNotAudited(ArbiterError):
    """The audit trail does not hold the object's deletion: it may be live (or the id mistyped); nothing changed."""

    code = "ERASE_NOT_DELETED"


@dataclass
class AuditErasure:
    """What ``erase_object`` did: entries erased per chain (their seqs), and entries already erased before."""

    erased: dict[TP, list[int]] = field(default_factory=dict)
    already: int = 0

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.erased.values())


def open_exclusive(path: Path) -> Rdict:
    """Open the audit store's primary, or raise ``AuditStoreBusy`` when its projection holds it."""
    if not (path / "CURRENT").exists():
        raise FileNotFoundError(f"no audit store at {path}")
    try:
        return store.open_primary(path)
    except Exception as e:
        if "lock" in str(e).lower():
            raise AuditStoreBusy(f"the audit store {path} is open by another process (the audit projection?): "
                                 f"stop it first ({e})") from e
        raise


def _deletion_of(entry: Entry, object_id: str) -> Event | None:
    """Return the entry's ``DELETED`` event of ``object_id``, None for any other entry."""
    if entry.value is None or entry.offset < 0:
        return None
    try:
        outcome = codec.decode_outcome(entry.value)
    except (DecodeError, ValueError):
        return None  # not an outcome (e.g. a record that did not decode): not a deletion
    if isinstance(outcome, Event) and outcome.type is EventType.DELETED and outcome.object_id == object_id:
        return outcome
    return None


def deletion(db: Rdict, object_id: str) -> Event | None:
    """Return ``object_id``'s audited ``DELETED`` event, found through the by-object index, or None."""
    for ek, raw in store.indexed(db, object_prefix(object_id)):
        found = _deletion_of(unpack_entry(ek, raw)[1], object_id)
        if found is not None:
            return found
    return None


def require_deletion(db: Rdict, object_id: str) -> Event:
    """Return ``object_id``'s audited ``DELETED`` event, or raise ``DeletionNotAudited``."""
    found = deletion(db, object_id)
    if found is None:
        raise DeletionNotAudited(f"the audit trail holds no DELETED event of object {object_id!r}: it is live, "
                                 "unknown (a mistyped id?) or its deletion is not audited yet (run the audit "
                                 "projection until it is); nothing was erased")
    return found


def erase_object(path: Path, object_id: str, reason: str) -> AuditErasure:
    """Drop the values of every audited record about ``object_id`` but its deletion's; append one erasure entry per
    chain touched. Refuse (``DeletionNotAudited``) unless the audit trail holds the object's ``DELETED`` event."""
    db = open_exclusive(path)
    try:
        require_deletion(db, object_id)
        return _erase(db, object_id, reason)
    finally:
        db.close()


def _erase(db: Rdict, object_id: str, reason: str) -> AuditErasure:
    found: list[Entry] = []
    result = AuditErasure()
    hashes: dict[tuple[TP, int], bytes] = {}
    for ek, raw in store.indexed(db, object_prefix(object_id)):
        stored, entry = unpack_entry(ek, raw)
        if entry.erased is not None or entry.value is None:
            result.already += 1
            continue
        if _deletion_of(entry, object_id) is not None:
            continue  # no document in it; kept, as the tombstone is
        if catalog_record(entry.value) is not None or generation_record(entry.value) is not None:
            continue  # a rules deploy or a rescale, not a decision: never erased
        if entry.envelope != ENVELOPE_V2:
            raise EraseRefused(f"{entry.topic}[{entry.partition}] record #{entry.seq} (offset {entry.offset}) of "
                               f"{object_id!r} was audited before issue 30: its hash covers the value itself, so it "
                               "cannot be dropped without breaking the chain; nothing was erased (docs/operations/erasure.md)")
        found.append(entry)
        hashes[((entry.topic, entry.partition), entry.seq)] = stored
    if not found:
        return result
    wb = store.new_batch()
    for entry in found:
        wb.put(entry_key(entry.topic, entry.partition, entry.seq),
               pack_entry(hashes[((entry.topic, entry.partition), entry.seq)], erased(entry)))
        result.erased.setdefault((entry.topic, entry.partition), []).append(entry.seq)
    heads = store.heads(db)
    now_ms = time.time_ns() // 1_000_000
    for tp, seqs in sorted(result.erased.items()):
        head = heads.get(tp) or Head(GENESIS, 0, 0)
        record = Entry(tp[0], tp[1], head.next_seq, ERASURE_OFFSET, now_ms, None,
                       erasure_value(object_id, sorted(seqs), reason, now_ms))
        h = link(head.hash, record)
        wb.put(entry_key(*tp, record.seq), pack_entry(h, record))
        wb.put(head_key(*tp), pack_head(Head(h, record.seq + 1, head.next_offset)))
    db.write(wb, store.write_options(True))
    _compact(db)
    return result


def _compact(db: Rdict) -> None:
    """Flush and compact the whole store, so the overwritten values leave the SST files and the WAL."""
    db.flush(True)
    db.compact_range(None, None)


def entries_about(path: Path, object_id: str) -> list[Entry]:
    """Return the audited entries the by-object index names for ``object_id`` (for checks and tests)."""
    from projections.audit.verify import reader

    with reader(path) as db:
        return [unpack_entry(ek, raw)[1] for ek, raw in store.indexed(db, object_prefix(object_id))]

