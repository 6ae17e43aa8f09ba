"""The rocksdb backend behind ``StateBackend``: shard servers' figures files are where its state is reported."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import Metric

from app.settings import Settings
from app.validator.layout import check_layout
from app.validator.progress import add_state_source, progress_path
from app.validator.rocks.metrics import shard_metrics
from app.validator.rocks.stats import rocks_state

_COUNTED = ("batches", "records", "replays", "restores", "restore_ms", "restore_bytes", "changelog_bytes", "snapshots",
            "snapshot_ms", "snapshot_bytes", "ttl_evictions", "core_records", "core_fallback_records")


class RocksBackend:
    """One RocksDB database per command-topic partition, held open by long-lived shard servers."""

    name = "rocksdb"

    def start(self, spark: Any, settings: Settings, checkpoint: str, *, available_now: bool) -> Any:  # noqa: ANN401
        check_layout(spark, checkpoint, {"state_backend": "rocksdb", "partitions": settings.partitions})
        add_state_source(progress_path(settings), lambda: rocks_state(settings))
        from app.validator.rocks.query import build_query

        return build_query(spark, settings, available_now=available_now)

    def state(self, settings: Settings, progress: dict[str, Any]) -> dict[str, Any] | None:
        rocks = rocks_state(settings)
        if rocks is None:
            return None
        live = rocks["servers_live"] > 0
        return {
            "source": "rocksdb shard servers", "rows": rocks["rows_estimate"], "sst_bytes": rocks["live_sst_bytes"],
            # The block cache and the memtables live in the server processes: unknown once none of them runs.
            "memory_bytes": rocks["block_cache_usage_bytes"] if live else None,
            "memory_limit_bytes": rocks["block_cache_limit_bytes"] if live else None,
            "memtable_bytes": rocks["memtable_bytes"] if live else None,
            "write_buffer_limit_bytes": rocks["write_buffer_limit_bytes"] if live else None,
            "servers_live": rocks["servers_live"], "shards": rocks["shards"], "updated_at_ms": rocks["updated_at_ms"],
            **{k: rocks[k] for k in _COUNTED},
        }

    def metrics(self, settings: Settings) -> Iterator[Metric]:
        return shard_metrics(settings)
