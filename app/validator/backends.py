"""Which state backend runs: chosen here, in one place, from ``settings.state_backend``."""

from __future__ import annotations

from app.errors import ArbiterError
from app.settings import Settings
from app.validator.backend import StateBackend
from app.validator.rocks.backend import RocksBackend
from app.validator.spark.backend import SparkBackend

BACKENDS: dict[str, StateBackend] = {b.name: b for b in (SparkBackend(), RocksBackend())}


class UnknownBackend(ArbiterError):
    """``settings.state_backend`` names no backend."""

    code = "UNKNOWN_STATE_BACKEND"


def backend_for(settings: Settings) -> StateBackend:
    """Return the backend ``settings.state_backend`` names."""
    try:
        return BACKENDS[settings.state_backend]
    except KeyError:
        raise UnknownBackend(f"state_backend={settings.state_backend!r}: expected one of {sorted(BACKENDS)}") from None
