"""The validator's Prometheus metrics, read at each scrape: the last micro-batch from the progress file the driver
writes, and the state backend's own metrics (per shard for the rocksdb backend: ``app.validator.rocks.metrics``).

Nothing is counted in the driver: the files are the source, so a scrape costs a few small reads and a metric that
nobody measured is absent rather than zero.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.metrics.families import gauge
from app.settings import Settings
from app.validator.backends import backend_for
from app.validator.progress import progress_path, spark_state


class ValidatorCollector(Collector):
    """Yield the validator's metrics for ``settings`` (its progress file and its checkpoint's shard servers)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        yield from self._progress()
        yield from backend_for(self.settings).metrics(self.settings)

    def _progress(self) -> Iterator[Metric]:
        try:
            p = json.loads(progress_path(self.settings).read_text())
        except (OSError, ValueError):
            return
        if p.get("batchId") is not None:
            yield gauge("arbiter_validator_last_batch_id", "Id of the newest micro-batch the driver saw", p["batchId"])
        yield gauge("arbiter_validator_last_batch_input_rows", "Commands read by that micro-batch",
                     p.get("numInputRows") or 0)
        yield gauge("arbiter_validator_last_batch_rows_per_second", "Its processed rows per second (Spark's figure)",
                     float(p.get("processedRowsPerSecond") or 0.0))
        durations = GaugeMetricFamily("arbiter_validator_last_batch_duration_seconds",
                                      "Its duration by phase (Spark's durationMs: triggerExecution is the whole batch)",
                                      labels=["phase"])
        for phase, ms in sorted((p.get("durationMs") or {}).items()):
            durations.add_metric([phase], ms / 1000)
        yield durations
        if p.get("timestamp"):
            at = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            yield gauge("arbiter_validator_last_batch_timestamp_seconds", "When that micro-batch started",
                         at.timestamp())
        offsets = GaugeMetricFamily("arbiter_validator_committed_offset",
                                    "Next commands offset per partition after that micro-batch", labels=["partition"])
        lag = GaugeMetricFamily("arbiter_validator_lag", "Commands on the topic not in that micro-batch, per partition "
                                "(Spark's latestOffset minus its endOffset)", labels=["partition"])
        for src in p.get("sources") or []:
            end, latest = self._offsets(src.get("endOffset")), self._offsets(src.get("latestOffset"))
            for part, off in sorted(end.items()):
                offsets.add_metric([str(part)], off)
                if part in latest:
                    lag.add_metric([str(part)], max(0, latest[part] - off))
        yield offsets
        yield lag
        spark = spark_state(p)
        if spark is not None:  # the reference backend's state, from Spark's state operators
            yield gauge("arbiter_validator_state_rows", "State rows (Spark state operators)", spark["state_rows"])
            yield gauge("arbiter_validator_state_memory_bytes", "State memory (Spark state operators)",
                         spark["state_memory_bytes"])
            yield gauge("arbiter_validator_last_batch_ttl_evictions", "Values removed by TTL in that micro-batch",
                         spark["ttl_evictions"])

    def _offsets(self, raw: object) -> dict[int, int]:
        """Return one source offset JSON (Spark writes it as a string or an object) for the commands topic."""
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return {}
        topic = parsed.get(self.settings.topic_commands) if isinstance(parsed, dict) else None
        return {int(p): int(o) for p, o in topic.items()} if isinstance(topic, dict) else {}
