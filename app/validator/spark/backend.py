"""The reference backend behind ``StateBackend``: its state figures are in Spark's own progress (state operators)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import Metric

from app.settings import Settings
from app.validator.progress import spark_state


class SparkBackend:
    """``transformWithState`` on Spark's RocksDB state store provider."""

    name = "spark"

    def start(self, spark: Any, settings: Settings, checkpoint: str, *, available_now: bool) -> Any:  # noqa: ANN401
        from app.validator.spark.query import start

        return start(spark, settings, checkpoint, available_now=available_now)

    def state(self, settings: Settings, progress: dict[str, Any]) -> dict[str, Any] | None:
        spark = spark_state(progress)
        if spark is None:
            return None
        return {"source": "spark state operators", "rows": spark["state_rows"],
                "memory_bytes": spark["state_memory_bytes"], "ttl_evictions_last_batch": spark["ttl_evictions"]}

    def metrics(self, settings: Settings) -> Iterator[Metric]:
        return iter(())  # its state metrics come from the progress file (app.validator.metrics)
