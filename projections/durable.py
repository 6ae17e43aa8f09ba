"""Durability on local disks: fsync a file or a directory by its path."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path | str) -> None:
    """fsync the file or directory at ``path``: its data, or the entries renamed into it, survive a machine crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
