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


class HistoryFigures:
    """The read model's history size for the status page, read through a reader of its own (the status figures are
    computed on a worker thread; the API's reader belongs to the event loop)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._rm: ReadModelPort | None = None

    def __call__(self) -> dict[str, int] | None:
        """Return ``{"events": n, "bytes": b}``, or None when the read model cannot say."""
        try:
            if self._rm is None:
                self._rm = open_reader(self.settings)
            size: dict[str, int] = self._rm.history_size()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - the page shows "–"; the next second tries again
            log.debug("read model: history size unknown", exc_info=True)
            return None
        return size

    def close(self) -> None:
        close = getattr(self._rm, "close", None)
        if close is not None:
            close()
