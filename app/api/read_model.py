"""Opening the DB projection's read model for the query side, and telling whether it can answer."""

from __future__ import annotations

from pathlib import Path

from app.api.deps import ReadModelPort
from app.settings import Settings


def read_model_root(settings: Settings) -> Path:
    """Return the DB projection's read model directory (``read_model_dir``, else ``<var_dir>/read_model``)."""
    return settings.read_model_dir or settings.path(settings.var_dir) / "read_model"


def open_read_model(settings: Settings) -> ReadModelPort | None:
    """Open the DB projection's read model (a RocksDB secondary), or None if it cannot be opened."""
    try:
        from projections.db import ReadModel
    except ImportError:  # pragma: no cover - the projection package is part of this repository
        return None
    root = read_model_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    rm: ReadModelPort = ReadModel(root)
    return rm


def read_model_ready(rm: ReadModelPort | None) -> bool:
    """Return True if the read model can answer: open, and (for the real one) the projection has created it."""
    if rm is None:
        return False
    root = getattr(rm, "root", None)
    if root is None:
        return True
    from projections.db.store import current_generation

    return current_generation(root) is not None
