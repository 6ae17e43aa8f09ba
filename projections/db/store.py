"""The read model's rocksdict store: documents, consumed offsets, gap reports, each object's history and the
access index of lists (``projections.db.indexes``), written in one WriteBatch.

On disk, ``<root>/current`` is a symlink to one generation directory ``<root>/gen-<ns>`` (a RocksDB). A rebuild
fills a fresh generation and swaps the symlink atomically (``os.replace``); readers and the live projection notice
the new target and reopen.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import cast

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from projections.db import indexes
from projections.db.history import HistoryEntry
from projections.db.port import TP, HistoryRow
from projections.db.view import ObjectView
from projections.rocks import prefixed

log = logging.getLogger(__name__)
CURRENT = "current"
DOC, OFFSET, GAP = b"d", b"o", b"g"


def options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_max_open_files(-1)  # required by secondary readers; also avoids table-cache churn
    return opts


def doc_key(object_id: str) -> bytes:
    return DOC + object_id.encode()


def offset_key(tp: TP) -> bytes:
    return OFFSET + tp[0].encode() + b"\x00" + str(tp[1]).encode()


def current_generation(root: Path) -> Path | None:
    """Return the generation ``<root>/current`` points at, or None before the first start."""
    try:
        return root / os.readlink(root / CURRENT)
    except FileNotFoundError:
        return None


def new_generation(root: Path) -> Path:
    """Return a fresh, not yet existing generation directory under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    return root / f"gen-{time.time_ns()}"


def swap_in(root: Path, generation: Path) -> None:
    """Point ``<root>/current`` at ``generation`` atomically, durable across a crash."""
    tmp = root / f".{CURRENT}-{time.time_ns()}"
    os.symlink(generation.name, tmp)
    os.replace(tmp, root / CURRENT)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ReadModelStore:
    """The primary (writing) instance of one generation. One process at a time (RocksDB's LOCK file enforces it)."""

    def __init__(self, path: Path, *, sync: bool = True) -> None:
        self.path = path
        self._db = Rdict(str(path), options())
        self._write_opts = WriteOptions()
        self._write_opts.sync = sync  # fsync the WAL per batch: survives a machine crash, not only a process crash
        self._sync = sync
        self._history_size = indexes.history_size(self._db)
        if self._db.get(indexes.LISTS_READY) is None:  # a store from before lists: index what it holds, once
            n = indexes.backfill_access(self._db, iter_views(self._db))
            if n:
                log.info("read model: access index of %d objects written (%s)", n, path.name)

    @classmethod
    def open_current(cls, root: Path, *, sync: bool = True) -> ReadModelStore:
        """Open the current generation under ``root``, creating the first one if there is none."""
        gen = current_generation(root)
        if gen is None:
            gen = new_generation(root)
            store = cls(gen, sync=sync)
            swap_in(root, gen)
            return store
        return cls(gen, sync=sync)

    def get(self, object_id: str) -> ObjectView | None:
        raw = self._db.get(doc_key(object_id))
        return ObjectView.from_bytes(raw) if raw is not None else None

    def get_many(self, object_ids: Iterable[str]) -> dict[str, ObjectView | None]:
        ids = list(object_ids)
        raws = cast(list[bytes | None], self._db[[doc_key(i) for i in ids]]) if ids else []
        return {i: ObjectView.from_bytes(r) if r is not None else None for i, r in zip(ids, raws, strict=True)}

    def offsets(self) -> dict[TP, int]:
        """Return the next offset to read per partition, as last written with the documents."""
        return iter_offsets(self._db)

    def successor(self) -> ReadModelStore | None:
        """If ``current`` now points at another generation (a rebuild), switch to it and delete this one."""
        gen = current_generation(self.path.parent)
        if gen is None or gen == self.path:
            return None
        self.close()
        nxt = ReadModelStore(gen, sync=self._sync)
        shutil.rmtree(self.path, ignore_errors=True)
        log.info("db projection: read model swapped to %s; %s removed", gen.name, self.path.name)
        return nxt

    def write(self, views: dict[str, ObjectView], offsets: dict[TP, int], gaps: dict[str, str] | None = None,
              history: list[HistoryRow] | None = None,
              previous: dict[str, ObjectView | None] | None = None) -> None:
        """Write documents, offsets, gap reports, history entries and the access index in one atomic WriteBatch.

        ``previous``: the stored view of each id in ``views`` (the projection has them); read here when not given.
        """
        wb = WriteBatch(raw_mode=True)
        if previous is None or not previous.keys() >= views.keys():
            previous = self.get_many(views)
        for object_id, view in views.items():
            wb.put(doc_key(object_id), view.to_bytes())
            indexes.update_access(wb, object_id, previous[object_id], view)
        size = self._history_size
        if history:
            size = dict(size)
            for object_id, version, data in history:
                wb.put(indexes.history_key(object_id, version), data)
                size["events"] += 1
                size["bytes"] += len(data)
            wb.put(indexes.HISTORY_SIZE, json.dumps(size).encode())
        for tp, off in offsets.items():
            wb.put(offset_key(tp), str(off).encode())
        for object_id, detail in (gaps or {}).items():
            wb.put(GAP + object_id.encode(), detail.encode())
        self._db.write(wb, self._write_opts)
        self._history_size = size

    def history(self, object_id: str, after: int = 0, limit: int | None = None,
                up_to: int | None = None) -> list[HistoryEntry]:
        """Return ``object_id``'s history entries with ``after < version <= up_to``, oldest first."""
        return indexes.read_history(self._db, object_id, after, limit, up_to)

    def views(self) -> Iterator[tuple[str, ObjectView]]:
        """Yield every (object_id, view), in key order."""
        yield from iter_views(self._db)

    def gaps(self) -> dict[str, str]:
        return iter_gaps(self._db)

    def close(self) -> None:
        if not self._sync:
            self._db.flush_wal(True)
        self._db.close()


def iter_views(db: Rdict) -> Iterator[tuple[str, ObjectView]]:
    for k, v in prefixed(db, DOC):
        yield k[1:].decode(), ObjectView.from_bytes(v)


def iter_offsets(db: Rdict) -> dict[TP, int]:
    out: dict[TP, int] = {}
    for k, v in prefixed(db, OFFSET):
        topic, _, part = k[1:].rpartition(b"\x00")
        out[(topic.decode(), int(part))] = int(v)
    return out


def iter_gaps(db: Rdict) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in prefixed(db, GAP):
        out[k[1:].decode()] = v.decode()
    return out


def gap_detail(**fields: object) -> str:
    return json.dumps(fields, sort_keys=True)


class RocksRebuildTarget:
    """A rebuild into a fresh generation ``<root>/gen-<ns>``, swapped in by replacing the ``current`` symlink."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation: Path | None = None
        self.previous = current_generation(root)

    def fresh(self) -> ReadModelStore:
        self.generation = new_generation(self.root)
        # No fsync per batch while building: the WAL is synced once on close, before the swap makes it visible.
        return ReadModelStore(self.generation, sync=False)

    def swap_in(self) -> str:
        assert self.generation is not None, "fresh() first"
        swap_in(self.root, self.generation)
        if self.previous is not None and self.previous != self.generation:
            _remove_if_unused(self.previous)
        return str(self.generation)


def _remove_if_unused(generation: Path) -> None:
    try:
        Rdict(str(generation), options()).close()  # fails while a live projection holds its LOCK
    except Exception:  # noqa: BLE001 - the live projection removes it after it switches
        log.info("rebuild: %s is still open by the live projection, which will remove it", generation.name)
        return
    shutil.rmtree(generation, ignore_errors=True)
