"""A projection's Prometheus metrics, read from its runner at each scrape: records and batches applied, batch time,
lag per partition, undecodable records, and the projection's own counters (the DB projection's gaps)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from projections.runner import Runner

# DbProjection.figures() keys -> (metric name without _total, help).
PROJECTION_COUNTERS = {
    "applied": ("arbiter_projection_applied", "Events applied to the read model"),
    "stale": ("arbiter_projection_duplicates", "Events at or below the stored version (replays), ignored"),
    "gaps": ("arbiter_projection_gaps", "Events above the stored version + 1: not applied, kept as gap reports"),
    "invalid": ("arbiter_projection_invalid", "Events that could not be applied to the stored view"),
}


class ProjectionCollector(Collector):
    """Yield one projection runner's metrics, labelled with the projection's name."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def collect(self) -> Iterator[Metric]:
        name, st = self.runner.projection.name, self.runner.stats

        def counter(metric: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(metric, doc, labels=["projection"])
            c.add_metric([name], value)
            return c

        yield counter("arbiter_projection_records", "Records consumed and handed to the projection (undecodable "
                      "ones included)", st.records)
        yield counter("arbiter_projection_batches", "Batches applied", st.batches)
        yield counter("arbiter_projection_batch_seconds", "Time applying batches and committing their offsets",
                      st.batch_seconds)
        yield counter("arbiter_projection_undecodable", "Records that did not decode (kept as data, logged)",
                      st.undecodable)
        last = GaugeMetricFamily("arbiter_projection_last_batch_seconds", "Duration of the last batch",
                                 labels=["projection"])
        last.add_metric([name], st.last_batch_seconds)
        yield last
        lag = GaugeMetricFamily("arbiter_projection_lag", "Records on the topic not yet applied (high watermark minus "
                                "next offset), per partition; measured about once a second", labels=["projection", "topic",
                                                                                                      "partition"])
        for (topic, part), n in sorted(st.lag.items()):
            lag.add_metric([name, topic, str(part)], n)
        yield lag
        for key, value in sorted(self.runner.projection.figures().items()):
            if key in PROJECTION_COUNTERS:
                yield counter(*PROJECTION_COUNTERS[key], value)
