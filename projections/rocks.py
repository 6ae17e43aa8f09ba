"""Typed access to the projections' rocksdict stores, which all run in raw mode (bytes keys and values)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

from rocksdict import Rdict


def prefixed(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(key, value)`` for every key starting with ``prefix``, in key order.

    rocksdict's stubs type keys as any of its key types; a raw-mode database holds only bytes.
    """
    for k, v in db.items(from_key=prefix):
        key, value = cast(bytes, k), cast(bytes, v)
        if not key.startswith(prefix):
            break
        yield key, value
