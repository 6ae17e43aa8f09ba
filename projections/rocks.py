"""Typed access to the projections' rocksdict stores, which all run in raw mode (bytes keys and values)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
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


def close_secondary(db: Rdict | None, directory: Path | None) -> None:
    """Close a secondary instance (if open) and delete its own small directory (if any)."""
    if db is not None:
        db.close()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
