"""The one seam between the validator's driver and its state backends: start a query, report state figures.

Both backends (``app.validator.spark``, the reference ``transformWithState`` one, and ``app.validator.rocks``,
RocksDB shards in long-lived servers) implement ``StateBackend``; ``app.validator.backends`` chooses one.
This module imports only the wiring at the top of ``app``, so both backends may import it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.metrics_core import Metric

from app.settings import Settings


def query_name(settings: Settings) -> str:
    """Return the validator query's name (unique per commands topic, so tests can run side by side)."""
    return f"arbiter-validator-{settings.topic_commands}"


class StateBackend(Protocol):
    """A validator state backend: what the driver starts and what the status page and ``/metrics`` read from it."""

    name: str

    def start(self, spark: Any, settings: Settings, checkpoint: str, *, available_now: bool) -> Any:  # noqa: ANN401
        """Check the checkpoint's layout and start the streaming query (the caller already holds the checkpoint)."""
        ...

    def state(self, settings: Settings, progress: dict[str, Any]) -> dict[str, Any] | None:
        """Return the status page's state figures from the last ``progress`` or the backend's own files, else None."""
        ...

    def metrics(self, settings: Settings) -> Iterator[Metric]:
        """Yield the backend's own Prometheus metrics (beyond what Spark's progress gives)."""
        ...
