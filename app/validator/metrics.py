"""The validator's Prometheus metrics, read at each scrape: the last micro-batch from the progress file the driver
writes, and per shard the rocksdb backend's shard servers' figures files (``app.validator.rocks.stats``).

Nothing is counted in the driver: the files are the source, so a scrape costs a few small reads and a metric that
nobody measured is absent rather than zero.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.errors import ArbiterError
from app.settings import Settings
from app.validator.progress import progress_path, spark_state
from app.validator.rocks.stats import MIB, file_prefix, read_stats, stats_dir

# Shard counters (totals since the server started): file key -> (metric name without _total, help, scale).
SHARD_COUNTERS = (
    ("batches", "arbiter_shard_batches", "Micro-batches the shard decided (re-emits: replays)", 1),
    ("records", "arbiter_shard_records", "Command records the shard was given", 1),
    ("replays", "arbiter_shard_replays", "Batches re-emitted from the batch-id memo instead of decided again", 1),
    ("opens", "arbiter_shard_opens", "Times the shard's database was opened", 1),
    ("restores", "arbiter_shard_restores", "Opens that restored from the checkpoint (changelogs or snapshot)", 1),
    ("restore_ms", "arbiter_shard_restore_seconds", "Time spent restoring", 0.001),
    ("restore_bytes", "arbiter_shard_restore_fetched_bytes", "Bytes fetched from the checkpoint to restore", 1),
    ("changelog_bytes", "arbiter_shard_changelog_bytes", "Changelog bytes written to the checkpoint location", 1),
    ("snapshots", "arbiter_shard_snapshots", "Snapshots uploaded", 1),
    ("snapshot_ms", "arbiter_shard_snapshot_seconds", "Time spent taking and uploading snapshots", 0.001),
    ("snapshot_bytes", "arbiter_shard_snapshot_bytes", "Snapshot bytes uploaded", 1),
    ("ttl_evictions", "arbiter_shard_ttl_evictions", "States deleted by TTL (expired tombstones)", 1),
)
SHARD_GAUGES = (
    ("rows_estimate", "arbiter_shard_state_rows", "Keys in the shard's RocksDB (rocksdb.estimate-num-keys)"),
    ("live_sst_bytes", "arbiter_shard_live_sst_bytes", "Size of the shard's live SST files"),
    ("last_batch", "arbiter_shard_last_batch", "Last batch id the shard applied"),
)


def _gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    g.add_metric(list((labels or {}).values()), value)
    return g


class ValidatorCollector(Collector):
    """Yield the validator's metrics for ``settings`` (its progress file and its checkpoint's shard servers)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        yield from self._progress()
        if self.settings.state_backend == "rocksdb":
            yield from self._shards()

    def _progress(self) -> Iterator[Metric]:
        try:
            p = json.loads(progress_path(self.settings).read_text())
        except (OSError, ValueError):
            return
        if p.get("batchId") is not None:
            yield _gauge("arbiter_validator_last_batch_id", "Id of the newest micro-batch the driver saw", p["batchId"])
        yield _gauge("arbiter_validator_last_batch_input_rows", "Commands read by that micro-batch",
                     p.get("numInputRows") or 0)
        yield _gauge("arbiter_validator_last_batch_rows_per_second", "Its processed rows per second (Spark's figure)",
                     float(p.get("processedRowsPerSecond") or 0.0))
        durations = GaugeMetricFamily("arbiter_validator_last_batch_duration_seconds",
                                      "Its duration by phase (Spark's durationMs: triggerExecution is the whole batch)",
                                      labels=["phase"])
        for phase, ms in sorted((p.get("durationMs") or {}).items()):
            durations.add_metric([phase], ms / 1000)
        yield durations
        if p.get("timestamp"):
            at = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
            yield _gauge("arbiter_validator_last_batch_timestamp_seconds", "When that micro-batch started",
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
            yield _gauge("arbiter_validator_state_rows", "State rows (Spark state operators)", spark["state_rows"])
            yield _gauge("arbiter_validator_state_memory_bytes", "State memory (Spark state operators)",
                         spark["state_memory_bytes"])
            yield _gauge("arbiter_validator_last_batch_ttl_evictions", "Values removed by TTL in that micro-batch",
                         spark["ttl_evictions"])

    def _offsets(self, raw: object) -> dict[int, int]:
        """Return one source offset JSON (Spark writes it as a string or an object) for the commands topic."""
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return {}
        topic = parsed.get(self.settings.topic_commands) if isinstance(parsed, dict) else None
        return {int(p): int(o) for p, o in topic.items()} if isinstance(topic, dict) else {}

    def _shards(self) -> Iterator[Metric]:
        s = self.settings
        try:
            stats = read_stats(stats_dir(s), file_prefix(s))
        except (OSError, ArbiterError):  # no usable socket directory: no server of ours runs on this host
            return
        if not stats.servers:
            return
        up = GaugeMetricFamily("arbiter_shard_server_up", "1 while the shard server that wrote this file runs",
                               labels=["server"])
        cache = GaugeMetricFamily("arbiter_shard_server_block_cache_usage_bytes",
                                  "Block cache in use (memtables charged to it), per live server", labels=["server"])
        updated = GaugeMetricFamily("arbiter_shard_server_updated_timestamp_seconds", "When the server last wrote its "
                                    "figures (at most once a second while it serves)", labels=["server"])
        for server in stats.servers:
            up.add_metric([server.name], 1 if server.live else 0)
            updated.add_metric([server.name], server.updated_at_ms / 1000)
            if server.live:
                cache.add_metric([server.name], server.block_cache_usage_bytes)
        yield from (up, cache, updated)
        yield _gauge("arbiter_shard_server_block_cache_limit_bytes", "Block cache limit of each server "
                     "(ARBITER_ROCKS_MEMORY_MB)", s.rocks_memory_mb * MIB)
        yield _gauge("arbiter_shard_server_write_buffer_limit_bytes", "Memtable budget of each server, charged to its "
                     "cache (ARBITER_ROCKS_WRITE_BUFFER_MB)", s.rocks_write_buffer_mb * MIB)
        shards = sorted(stats.shards.items())
        for key, name, doc in SHARD_GAUGES:
            g = GaugeMetricFamily(name, doc, labels=["partition"])
            for part, f in shards:
                if key in f:
                    g.add_metric([str(part)], f[key])
            yield g
        memtables = GaugeMetricFamily("arbiter_shard_memtable_bytes", "Memtables of the shard (live servers only)",
                                      labels=["partition"])
        live = {p for server in stats.servers if server.live for p in server.shards}
        for part, f in shards:
            if part in live:
                memtables.add_metric([str(part)], f.get("memtable_bytes", 0))
        yield memtables
        decisions = CounterMetricFamily("arbiter_shard_decisions", "Output records by outcome (event or rejection)",
                                        labels=["partition", "outcome"])
        for part, f in shards:
            decisions.add_metric([str(part), "event"], f.get("events_out", 0))
            decisions.add_metric([str(part), "rejection"], f.get("rejections_out", 0))
        yield decisions
        for key, name, doc, scale in SHARD_COUNTERS:
            c = CounterMetricFamily(name, doc + " (since its server started)", labels=["partition"])
            for part, f in shards:
                c.add_metric([str(part)], f.get(key, 0) * scale)
            yield c
