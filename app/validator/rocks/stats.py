"""Read the shard servers' figures files (``<var_dir>/status/shards/*.json``) and sum them: the rocksdb backend's state
figures for the progress line, the status page and the validator's metrics.

A server writes its file at most once a second while it serves, and once more as it stops; its counters are totals
since it started. A file outlives its server: RocksDB's figures in it (rows, SST bytes) still describe the shard on
disk, but the block cache and the memtables went with the process, so those are counted for live servers only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import ArbiterError
from app.settings import Settings, checkpoint_uri

MIB = 1024 * 1024
# Counters a server keeps per shard (absent when zero), summed over shards.
COUNTERS = ("batches", "records", "events_out", "rejections_out", "replays", "opens", "restores", "restore_ms",
            "restore_bytes", "changelog_bytes", "snapshots", "snapshot_ms", "snapshot_bytes", "ttl_evictions",
            "core_records", "core_fallback_records")
# RocksDB's own estimates per open shard (rocksdb.estimate-num-keys, live-sst-files-size, cur-size-all-mem-tables).
GAUGES = ("rows_estimate", "live_sst_bytes", "memtable_bytes")


@dataclass
class ServerFile:
    """One server's figures file as read."""

    name: str
    pid: int
    live: bool
    updated_at_ms: int
    block_cache_usage_bytes: int
    shards: dict[int, dict[str, int]]


@dataclass
class ShardStats:
    """The servers of one checkpoint on this host: their files and, per partition, the newest figures."""

    servers: list[ServerFile] = field(default_factory=list)
    shards: dict[int, dict[str, int]] = field(default_factory=dict)

    def summary(self, settings: Settings) -> dict[str, int]:
        """Return the sums the progress line and the status page show (limits: per live server, from settings)."""
        live = [s for s in self.servers if s.live]
        out = {k: sum(f.get(k, 0) for f in self.shards.values()) for k in (*GAUGES, *COUNTERS)}
        out.update({
            "shards": len(self.shards), "servers": len(self.servers), "servers_live": len(live),
            "updated_at_ms": max((s.updated_at_ms for s in self.servers), default=0),
            "memtable_bytes": sum(f.get("memtable_bytes", 0) for p, f in self.shards.items() if self._live(p)),
            "block_cache_usage_bytes": sum(s.block_cache_usage_bytes for s in live),
            "block_cache_limit_bytes": len(live) * settings.rocks_memory_mb * MIB,
            "write_buffer_limit_bytes": len(live) * settings.rocks_write_buffer_mb * MIB,
        })
        return out

    def _live(self, partition: int) -> bool:
        return any(s.live and partition in s.shards for s in self.servers)


def server_alive(pid: int) -> bool:
    """Return whether ``pid`` is a running shard server on this host (its command line, so a reused pid is not)."""
    try:
        return b"app.validator.rocks.server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def stats_dir(settings: Settings) -> Path:
    return settings.path(settings.var_dir) / "status" / "shards"


def file_prefix(settings: Settings) -> str:
    """Return the name prefix of this checkpoint's servers' files (their socket's stem without the lane)."""
    from app.validator.rocks.client import socket_path  # the socket naming lives with the client

    return socket_path(settings, checkpoint_uri(settings), 0).stem.rsplit("-", 1)[0] + "-"


def read_stats(directory: Path, prefix: str = "") -> ShardStats:
    """Read every ``<prefix>*.json`` in ``directory``; per partition keep the most recently written figures."""
    stats = ShardStats()
    for path in sorted(directory.glob(f"{prefix}*.json")):
        try:
            raw = json.loads(path.read_text())
            server = ServerFile(path.stem, int(raw["pid"]), server_alive(int(raw["pid"])), int(raw["updated_at_ms"]),
                                int(raw.get("block_cache_usage_bytes", 0)),
                                {int(p): {k: int(v) for k, v in f.items()} for p, f in (raw.get("shards") or {}).items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # a file being replaced or not ours: the next read sees the new one
        stats.servers.append(server)
    for server in sorted(stats.servers, key=lambda s: s.updated_at_ms):
        stats.shards.update(server.shards)
    return stats


def rocks_state(settings: Settings) -> dict[str, int] | None:
    """Return the summed figures of this checkpoint's shard servers on this host, or None when none wrote any."""
    try:
        prefix = file_prefix(settings)
    except (OSError, ArbiterError):  # the socket directory is unusable: then no server of ours runs on this host
        return None
    stats = read_stats(stats_dir(settings), prefix)
    return stats.summary(settings) if stats.servers else None
