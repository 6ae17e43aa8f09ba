"""The RocksDB read model's history and access index: their keys, their upkeep in a batch, and their reads.

- ``h<object id>\\0<version: 8 bytes>`` -> a history entry (``projections.db.history``), one per event that moved
  the view;
- ``a<grantee>\\0<role letter><updated_at: 8 bytes of microseconds><object id>`` -> the version, one per row of
  ``projections.db.lists.access_rows``;
- ``mhistory`` -> ``{"events": n, "bytes": b}``, the history's size (the status page); ``mlists`` marks a store
  whose access index is complete.

Ids, principals and grantees never hold U+0000 (``commands.json_text``), so ``\\0`` ends each name in a key, and
big-endian numbers sort as numbers: one object's history, and one grantee's role, are each one key range.
"""

from __future__ import annotations

import heapq
import json
import struct
from collections.abc import Iterable, Iterator
from typing import cast

from rocksdict import Rdict, WriteBatch

from projections.db.history import HistoryEntry
from projections.db.lists import ListItem, Page, Role, access_rows, micros
from projections.db.view import ObjectView

HIST, ACCESS = b"h", b"a"
HISTORY_SIZE, LISTS_READY = b"mhistory", b"mlists"
_Q = struct.Struct(">Q")


def history_key(object_id: str, version: int) -> bytes:
    return HIST + object_id.encode() + b"\x00" + _Q.pack(version)


def _role_prefix(grantee: str, role: Role) -> bytes:
    return ACCESS + grantee.encode() + b"\x00" + role.code.encode()


def access_keys(object_id: str, view: ObjectView | None) -> dict[bytes, bytes]:
    """Return the access-index keys of ``view`` and their value (its version)."""
    rows = access_rows(view)
    if not rows:
        return {}
    assert view is not None
    tail = _Q.pack(micros(view.updated_at)) + object_id.encode()
    version = str(view.version).encode()
    return {_role_prefix(grantee, role) + tail: version for grantee, role in rows}


def update_access(wb: WriteBatch, object_id: str, before: ObjectView | None, after: ObjectView) -> None:
    """Put ``after``'s access rows into ``wb`` and delete those of ``before`` it no longer has."""
    new = access_keys(object_id, after)
    for key in access_keys(object_id, before).keys() - new.keys():
        wb.delete(key)
    for key, value in new.items():
        wb.put(key, value)


def history_size(db: Rdict) -> dict[str, int]:
    """Return ``{"events": n, "bytes": b}`` of the history (zeros before the first entry)."""
    raw = db.get(HISTORY_SIZE)
    return json.loads(raw) if raw is not None else {"events": 0, "bytes": 0}


def read_history(db: Rdict, object_id: str, after: int = 0, limit: int | None = None,
                 up_to: int | None = None) -> list[HistoryEntry]:
    """Return ``object_id``'s entries with ``after < version <= up_to``, oldest first, at most ``limit``."""
    prefix = HIST + object_id.encode() + b"\x00"
    out: list[HistoryEntry] = []
    for k, v in _from(db, prefix, _Q.pack(after + 1)):
        version = _Q.unpack(k[len(prefix):])[0]
        if (up_to is not None and version > up_to) or (limit is not None and len(out) >= limit):
            break
        out.append(HistoryEntry(version, v))
    return out


def _from(db: Rdict, prefix: bytes, start: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(key, value)`` of keys under ``prefix`` from ``prefix + start`` on, in key order."""
    for k, v in db.items(from_key=prefix + start):
        key, value = cast(bytes, k), cast(bytes, v)  # a raw-mode database holds only bytes
        if not key.startswith(prefix):
            break
        yield key, value


def _range(db: Rdict, prefix: bytes, start: bytes) -> Iterator[tuple[int, str, int]]:
    for k, v in _from(db, prefix, start):
        tail = k[len(prefix):]
        yield _Q.unpack(tail[:8])[0], tail[8:].decode(), int(v)


def read_page(db: Rdict, ranges: Iterable[tuple[str, Role]], since_us: int, after: tuple[int, str] | None,
              limit: int) -> Page:
    """Return the first ``limit`` objects of the access ranges changed at or after ``since_us`` and after the
    cursor ``after``, in ``(updated_at, id)`` order, each once however many of the ranges hold it."""
    start = _Q.pack(since_us)
    if after is not None and (after[0], after[1]) >= (since_us, ""):
        start = _Q.pack(after[0]) + after[1].encode() + b"\x00"  # the smallest key after the cursor's
    merged = heapq.merge(*(_range(db, _role_prefix(g, r), start) for g, r in ranges))
    items: list[ListItem] = []
    last: tuple[int, str] | None = None
    for us, oid, version in merged:
        if (us, oid) == last:
            continue
        last = (us, oid)
        if len(items) == limit:
            return Page(items, True)
        items.append(ListItem(oid, version, us))
    return Page(items, False)


def backfill_access(db: Rdict, views: Iterator[tuple[str, ObjectView]], wb_size: int = 10_000) -> int:
    """Write the access rows of every view (a store made before the index existed); return how many views."""
    n = 0
    wb = WriteBatch(raw_mode=True)
    for object_id, view in views:
        for key, value in access_keys(object_id, view).items():
            wb.put(key, value)
        n += 1
        if n % wb_size == 0:
            db.write(wb)
            wb = WriteBatch(raw_mode=True)
    wb.put(LISTS_READY, b"1")
    db.write(wb)
    return n
