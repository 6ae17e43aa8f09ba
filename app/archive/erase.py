"""Purge an erased object's documents from a local archive: each Parquet file rewritten without them, in place.

Every Parquet file under the archive's ``stream/`` and ``compacted/`` (committed, covered by a compaction, or a
failed batch's leftover: all hold bytes) with rows of the object is rewritten with the ``value`` of those rows
nulled, except a DELETED event's (it carries no document: ids, principal, owner; a rebuild from the archive folds
it into the tombstone). Every other column stays, and the file's key-value metadata ``arbiter.erased`` records
each nulled row's coordinates, SHA-256 and length. A file is rewritten beside itself under a hidden name and
renamed over the old one; its stale Hadoop ``.crc`` goes first (a reader through Hadoop's local file system
checks a file against its ``.crc`` when there is one).

Spark's file-sink log records each file's size and modification time (``SinkFileStatus``), and Spark reads a
listed file with that size: so each log entry naming a rewritten file gets its new size and time, the log file
rewritten the same way. Both steps are idempotent, and the log step re-derives what to fix from the files
(``arbiter.erased`` and a size that differs), so a purge stopped between them is finished by running it again.
The archive query and compaction must be stopped (``lock_all``: ``arbiter archive run`` holds ``_lock``,
``arbiter archive compact`` ``_compact.lock``, so the two still run side by side).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import ArbiterError
from app.validator.lock import FileLock
from projections.archived import COMPACTED, STREAM, local_path
from projections.durable import fsync_path

MARKER = b"arbiter.erased"
LOCK, COMPACT_LOCK = "_lock", "_compact.lock"  # hidden names for Spark: "_" prefixed files are not data


class ArchiveBusy(ArbiterError):
    """The archive query or a compaction holds the archive: stop it first."""

    code = "ARCHIVE_BUSY"


def lock(root: Path, what: str, name: str = LOCK) -> FileLock:
    """Take one of the archive's locks (the query's ``_lock``, compaction's ``_compact.lock``) or raise
    ``ArchiveBusy`` naming its holder."""
    held = FileLock(root / name)
    if not held.try_acquire():
        raise ArchiveBusy(f"the archive {root} is in use by pid {held.holder()} (arbiter archive "
                          f"{'compact' if name == COMPACT_LOCK else 'run'}): stop it before {what}")
    return held


def lock_all(root: Path, what: str) -> list[FileLock]:
    """Take both locks: no query writes the stream and no compaction copies it while an erasure rewrites them."""
    first = lock(root, what)
    try:
        return [first, lock(root, what, COMPACT_LOCK)]
    except BaseException:
        first.release()
        raise


class ArchiveNotDeleted(ArbiterError):
    """The archive has not archived the object's deletion yet: a later batch could still bring its documents."""

    code = "ERASE_NOT_ARCHIVED"


@dataclass
class ArchiveErasure:
    """What a purge did: the files rewritten, the rows whose value it nulled, the log entries it updated."""

    files: list[Path] = field(default_factory=list)
    rows: int = 0
    log_entries: int = 0


def erase_archive(root: Path, object_id: str, held: list[FileLock] | None = None) -> ArchiveErasure:
    """Null the value of ``object_id``'s rows (but its DELETED event's) in every Parquet file of the archive,
    under the archive's locks (``held``, else taken here)."""
    done = ArchiveErasure()
    held = held or lock_all(root, "erasing")
    try:
        found = {f: _types(f, object_id) for f in sorted(p for d in (STREAM, COMPACTED)
                                                          for p in (root / d).rglob("*.parquet"))}
        if any(found.values()) and not any("DELETED" in t for t in found.values()):
            raise ArchiveNotDeleted(f"the archive holds records of {object_id!r} but not its DELETED event: run the "
                                    "archive query until it has archived the deletion, then erase again; nothing "
                                    "was erased in the archive")
        for f in (f for f, t in found.items() if t):
            n = _purge_file(f, object_id)
            if n:
                done.files.append(f)
                done.rows += n
        done.log_entries = _sync_log(root / STREAM)
    finally:
        for h in held:
            h.release()
    return done


def _types(path: Path, object_id: str) -> set[str]:
    """Return the ``type`` values of ``object_id``'s rows in one file ("" for a row without one)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    pf = pq.ParquetFile(path)
    if "object_id" not in pf.schema_arrow.names:
        return set()
    t = pf.read(columns=["object_id", "type"])
    mine = t.filter(pc.fill_null(pc.equal(t.column("object_id"), object_id), False))
    return {x or "" for x in mine.column("type").to_pylist()}


def _purge_file(path: Path, object_id: str) -> int:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    pf = pq.ParquetFile(path)
    if "object_id" not in pf.schema_arrow.names:
        return 0
    ids = pf.read(columns=["object_id", "type", "value"])
    hit = pc.and_(pc.and_(pc.equal(ids.column("object_id"), object_id), pc.is_valid(ids.column("value"))),
                  pc.invert(pc.fill_null(pc.equal(ids.column("type"), "DELETED"), False)))
    rows = [i for i, h in enumerate(hit.to_pylist()) if h]
    if not rows:
        return 0
    table = pf.read()
    values = table.column("value").to_pylist()
    parts, offsets = table.column("partition").to_pylist(), table.column("offset").to_pylist()
    meta = dict(table.schema.metadata or {})
    erased = json.loads(meta.get(MARKER, b"[]"))
    for i in rows:
        v = values[i]
        erased.append({"object_id": object_id, "partition": parts[i], "offset": offsets[i],
                       "sha256": hashlib.sha256(v).hexdigest(), "length": len(v)})
        values[i] = None
    meta[MARKER] = json.dumps(erased, sort_keys=True).encode()
    idx = table.schema.get_field_index("value")
    table = table.set_column(idx, table.schema.field(idx), pa.array(values, type=table.schema.field(idx).type))
    table = table.replace_schema_metadata(meta)
    first = pf.metadata.row_group(0).column(0) if pf.metadata.num_row_groups else None
    int96 = any(pf.schema.column(i).physical_type == "INT96" for i in range(len(pf.schema)))
    tmp = path.with_name(f".{path.name}.erase.tmp")
    pq.write_table(table, tmp, compression=_codec(first.compression if first else "SNAPPY"),
                   use_deprecated_int96_timestamps=int96)  # Spark wrote INT96 timestamps: keep its types
    fsync_path(tmp)
    _replace(tmp, path)
    return len(rows)


def _sync_log(stream: Path) -> int:
    """Give each sink-log entry of a purged file that file's size and time; return how many entries changed."""
    meta = stream / "_spark_metadata"
    if not meta.is_dir():
        return 0
    changed = 0
    for log_file in sorted(f for f in meta.iterdir() if f.name.removesuffix(".compact").isdigit()):
        lines = log_file.read_text().splitlines()
        out, touched = lines[:1], 0
        for line in lines[1:]:
            entry: dict[str, Any] = json.loads(line)
            path = local_path(entry["path"])
            st = os.stat(path) if path.exists() else None
            now = None if st is None else (st.st_size, st.st_mtime_ns // 1_000_000)
            if now is not None and now != (entry.get("size"), entry.get("modificationTime")) and _purged(path):
                entry["size"], entry["modificationTime"] = now
                line, touched = json.dumps(entry, separators=(",", ":")), touched + 1
            out.append(line)
        if touched:
            tmp = log_file.with_name(f".{log_file.name}.erase.tmp")
            tmp.write_text("\n".join(out))  # Spark writes no newline after the last entry
            fsync_path(tmp)
            _replace(tmp, log_file)
            changed += touched
    return changed


def _purged(path: Path) -> bool:
    import pyarrow.parquet as pq

    return MARKER in (pq.read_metadata(path).metadata or {})


def _codec(name: str) -> str:
    return "none" if name.upper() == "UNCOMPRESSED" else name.lower()


def _replace(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` over ``path`` after dropping ``path``'s Hadoop checksum (it would no longer match)."""
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
