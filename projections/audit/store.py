"""The audit store: chain entries, chain heads and a by-object index in one rocksdict, appended in atomic batches.

rocksdict rather than Avro container files: an append of entries, heads and index is one atomic WriteBatch (so
the stored heads double as the consumed offsets, exactly once), and ``show`` reads one object's history through
the index without scanning segments.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from projections.audit.chain import Head, head_key, parse_chain_key, unpack_head
from projections.rocks import prefixed

if TYPE_CHECKING:
    from collections.abc import Iterator

TP = tuple[str, int]


def options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_open_files(-1)
    return opts


def open_primary(path: Path) -> Rdict:
    path.mkdir(parents=True, exist_ok=True)
    return Rdict(str(path), options())


def open_reader(path: Path, secondary: Path) -> Rdict:
    """Open ``path`` as a secondary instance caught up with the writing projection, if any."""
    db = Rdict(str(path), options(), access_type=AccessType.secondary(str(secondary)))
    db.try_catch_up_with_primary()
    return db


def write_options(sync: bool) -> WriteOptions:
    wo = WriteOptions()
    wo.sync = sync
    return wo


def new_batch() -> WriteBatch:
    return WriteBatch(raw_mode=True)


def heads(db: Rdict) -> dict[TP, Head]:
    return {parse_chain_key(k): unpack_head(v) for k, v in prefixed(db, b"h")}


def head_of(db: Rdict, tp: TP) -> Head | None:
    raw = db.get(head_key(*tp))
    return unpack_head(raw) if raw is not None else None


def indexed(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(entry key, packed entry)`` of every chain entry an index under ``prefix`` points at, in index order."""
    for k, _ in prefixed(db, prefix):
        ek = k[len(prefix):]
        raw = db.get(ek)
        if raw is not None:
            yield ek, raw
