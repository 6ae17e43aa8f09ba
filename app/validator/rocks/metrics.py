"""The rocksdb backend's Prometheus metrics: per shard server and per shard, from the servers' figures files."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from app.errors import ArbiterError
from app.metrics.families import gauge
from app.settings import Settings
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
    ("core_records", "arbiter_shard_core_records", "Command records decided by the compiled core (core/)", 1),
    ("core_fallback_records", "arbiter_shard_core_fallback_records", "Command records the compiled core handed "
     "back to the Python fold (rules in force, undecodable or traced records, ...)", 1),
)
SHARD_GAUGES = (
    ("rows_estimate", "arbiter_shard_state_rows", "Keys in the shard's RocksDB (rocksdb.estimate-num-keys)"),
    ("live_sst_bytes", "arbiter_shard_live_sst_bytes", "Size of the shard's live SST files"),
    ("last_batch", "arbiter_shard_last_batch", "Last batch id the shard applied"),
)


def shard_metrics(s: Settings) -> Iterator[Metric]:
    """Yield the shard servers' figures on this host for ``s``'s checkpoint (nothing when none wrote any)."""
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
    yield gauge("arbiter_shard_server_block_cache_limit_bytes", "Block cache limit of each server "
                 "(ARBITER_ROCKS_MEMORY_MB)", s.rocks_memory_mb * MIB)
    yield gauge("arbiter_shard_server_write_buffer_limit_bytes", "Memtable budget of each server, charged to its "
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
