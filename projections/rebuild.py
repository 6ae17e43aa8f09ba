"""Rebuild the read model: replay the events topic from the beginning into a fresh store, swap it in when caught up."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from projections.db.port import RebuildTarget
from projections.db.projection import DbCounts, DbProjection
from projections.runner import Runner, RunnerConfig, RunStats

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RebuildResult:
    generation: str
    stats: RunStats
    counts: DbCounts
    seconds: float


def rebuild_read_model(config: RunnerConfig, target: RebuildTarget) -> RebuildResult:
    """Fill a fresh store from offset 0 of every partition until caught up, then swap it in atomically.

    A running DB projection keeps serving from the old store meanwhile; after the swap it notices, moves to the
    new store, seeks to its stored offsets and (RocksDB) removes the old generation. Readers follow on their next
    read (PostgreSQL) or refresh (RocksDB); none sees a half-built model.
    """
    started = time.monotonic()
    projection = DbProjection(target.fresh(), follow_swaps=False)
    cfg = replace(config, group_id=f"{config.group_id}-rebuild", assign_all=True, stop_when_caught_up=True)
    stats = Runner(cfg, projection).run()  # closes the store: durable before it becomes visible
    name = target.swap_in()
    log.info("rebuild: %s swapped in (%d records, %d applied) in %.1fs", name, stats.records,
             projection.counts.applied, time.monotonic() - started)
    return RebuildResult(name, stats, projection.counts, time.monotonic() - started)
