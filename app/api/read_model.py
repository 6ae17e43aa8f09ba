"""Opening the DB projection's read model for the query side, and telling whether it can answer."""

from __future__ import annotations

import logging

from app.api.deps import ReadModelPort
from app.read_models import open_reader
from app.settings import Settings

log = logging.getLogger(__name__)


def open_read_model(settings: Settings) -> ReadModelPort | None:
    """Open the configured read model (``ARBITER_READ_MODEL``), or None if it cannot be opened."""
    try:
        rm: ReadModelPort = open_reader(settings)
    except Exception:  # noqa: BLE001 - the API still starts; reads answer 503 READ_MODEL_UNAVAILABLE
        log.exception("read model: could not open the %s read model", settings.read_model)
        return None
    return rm


def read_model_ready(rm: ReadModelPort | None) -> bool:
    """Return True if the read model can answer: open, and (for a real one) created by the projection."""
    if rm is None:
        return False
    ready = getattr(rm, "ready", None)
    return bool(ready()) if callable(ready) else True
