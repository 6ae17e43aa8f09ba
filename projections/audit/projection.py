"""The audit projection: append every consumed decision, decodable or not, to its partition's hash chain."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from rocksdict import Rdict, WriteOptions

from commands import Rejection
from commands.errors import ArbiterError
from projections.audit import store
from projections.audit.chain import (
    GENESIS,
    REJECTION_INDEX_MARK,
    RESTART_OFFSET,
    Entry,
    Head,
    command_key,
    entry_key,
    head_key,
    index_key,
    link,
    pack_entry,
    pack_head,
    rejection_key,
    restart_value,
    unpack_entry,
)
from projections.rocks import prefixed
from projections.runner import Item, Projection
from schemas import codec
from schemas.wire import DecodeError

TP = tuple[str, int]


class AuditOffsetGap(ArbiterError):
    """A record arrived past the chain's next offset: appending it would leave a hole in the audit trail."""

    code = "AUDIT_OFFSET_GAP"


class AuditProjection(Projection):
    """Exactly-once append: each chain head stores the next offset, written in the same batch as the entries."""

    name = "audit"
    stores_offsets = True

    def __init__(self, path: Path, *, sync: bool = True) -> None:
        self.path = path
        self._db = store.open_primary(path)
        self._write_opts = store.write_options(sync)
        self._heads = store.heads(self._db)
        self.appended = 0
        self.backfilled = 0  # rejections indexed at open, in a store written before that index
        if self._db.get(REJECTION_INDEX_MARK) is None:
            self.backfilled = backfill_rejection_index(self._db, self._write_opts)

    def start_offsets(self, partitions: Sequence[TP]) -> dict[TP, int]:
        return {tp: self._heads[tp].next_offset for tp in partitions if tp in self._heads}

    def apply(self, items: Sequence[Item]) -> None:
        wb = store.new_batch()
        touched: set[TP] = set()
        for it in items:
            rec = it.record
            tp = (rec.topic, rec.partition)
            head = self._heads.get(tp) or Head(GENESIS, 0, 0)
            if rec.offset < head.next_offset:
                continue  # already in the chain (a re-delivery after a seek); appending twice would fork history
            if rec.offset > head.next_offset and tp in self._heads:
                raise AuditOffsetGap(f"audit projection: {rec.where} arrived, but the chain of {rec.topic}"
                                     f"[{rec.partition}] expects offset {head.next_offset}: offsets "
                                     f"{head.next_offset}..{rec.offset - 1} were never read; nothing of this batch "
                                     "was appended")
            entry = Entry(rec.topic, rec.partition, head.next_seq, rec.offset, rec.timestamp_ms, rec.key, rec.value)
            h = link(head.hash, entry)
            wb.put(entry_key(rec.topic, rec.partition, entry.seq), pack_entry(h, entry))
            object_id = it.outcome.object_id if it.outcome is not None else _key_text(rec.key)
            if object_id:
                wb.put(index_key(object_id, rec.topic, rec.partition, entry.seq), b"")
            outcome = it.outcome
            if outcome is not None and outcome.principal is not None and outcome.command_id is not None:
                # what GET /commands/{id} answers from after an API restart (projections.audit.outcomes)
                wb.put(command_key(outcome.principal, outcome.command_id, rec.topic, rec.partition, entry.seq), b"")
            if isinstance(outcome, Rejection) and outcome.principal is not None and outcome.object_id is not None:
                # what GET /objects/{id}/events?include=rejections reads: the caller's own only
                wb.put(rejection_key(outcome.principal, outcome.object_id, outcome.current_version or 0,
                                     rec.topic, rec.partition, entry.seq), b"")
            self._heads[tp] = Head(h, entry.seq + 1, rec.offset + 1)
            touched.add(tp)
            self.appended += 1
        for tp in touched:
            wb.put(head_key(*tp), pack_head(self._heads[tp]))
        if touched:
            self._db.write(wb, self._write_opts)

    def restart_at(self, tp: TP, lost_from: int | None, resume_at: int, reason: str) -> None:
        """Append a restart entry (hashed into the chain) and move the head to ``resume_at``, in one batch."""
        head = self._heads.get(tp) or Head(GENESIS, 0, 0)
        now_ms = time.time_ns() // 1_000_000
        entry = Entry(tp[0], tp[1], head.next_seq, RESTART_OFFSET, now_ms, None,
                      restart_value(lost_from, resume_at, reason, now_ms))
        h = link(head.hash, entry)
        wb = store.new_batch()
        wb.put(entry_key(tp[0], tp[1], entry.seq), pack_entry(h, entry))
        self._heads[tp] = Head(h, entry.seq + 1, resume_at)
        wb.put(head_key(*tp), pack_head(self._heads[tp]))
        self._db.write(wb, self._write_opts)

    def close(self) -> None:
        self._db.close()


def backfill_rejection_index(db: Rdict, write_opts: WriteOptions, batch: int = 10_000) -> int:
    """Index every audited rejection by (principal, object) in a store written before that index was (once: the
    store is marked); return how many were indexed. Erased entries have nothing left to answer with and are skipped."""
    wb, pending, done = store.new_batch(), 0, 0
    for ek, raw in prefixed(db, b"r"):
        _, entry = unpack_entry(ek, raw)
        if entry.value is None or entry.offset < 0:
            continue
        try:
            outcome = codec.decode_outcome(entry.value)
        except (DecodeError, ValueError):
            continue
        if isinstance(outcome, Rejection) and outcome.principal is not None and outcome.object_id is not None:
            wb.put(rejection_key(outcome.principal, outcome.object_id, outcome.current_version or 0,
                                 entry.topic, entry.partition, entry.seq), b"")
            pending, done = pending + 1, done + 1
            if pending >= batch:
                db.write(wb, write_opts)
                wb, pending = store.new_batch(), 0
    wb.put(REJECTION_INDEX_MARK, b"")
    db.write(wb, write_opts)
    return done


def _key_text(key: bytes | None) -> str | None:
    """The Kafka key is the object id; use it to index records that did not decode."""
    if not key:
        return None
    try:
        return key.decode()
    except UnicodeDecodeError:
        return None
