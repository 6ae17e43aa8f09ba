"""Rebuild the read model: replay the events topic from the beginning into a fresh generation, swap it in when caught up."""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rocksdict import Rdict

from projections.db.projection import DbCounts, DbProjection
from projections.db.store import current_generation, new_generation, options, swap_in
from projections.runner import Runner, RunnerConfig, RunStats

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RebuildResult:
    generation: Path
    previous: Path | None
    stats: RunStats
    counts: DbCounts
    seconds: float


def rebuild_read_model(config: RunnerConfig, root: Path) -> RebuildResult:
    """Fill a fresh generation from offset 0 of every partition until caught up, then point ``current`` at it.

    A running DB projection keeps serving from the old generation meanwhile; after the swap it notices the new
    target, reopens it, seeks to its stored offsets and removes the old generation. With no projection running,
    the old generation is removed here. Readers follow the swap on their next refresh.
    """
    started = time.monotonic()
    previous = current_generation(root)
    gen = new_generation(root)
    # No fsync per batch while building: the WAL is synced once on close, before the swap makes it visible.
    projection = DbProjection(root, sync=False, generation=gen)
    cfg = replace(config, group_id=f"{config.group_id}-rebuild", assign_all=True, stop_when_caught_up=True)
    stats = Runner(cfg, projection).run()
    swap_in(root, gen)
    log.info("rebuild: %s swapped in (%d records, %d applied) in %.1fs", gen.name, stats.records,
             projection.counts.applied, time.monotonic() - started)
    if previous is not None and previous != gen:
        _remove_if_unused(previous)
    return RebuildResult(gen, previous, stats, projection.counts, time.monotonic() - started)


def _remove_if_unused(generation: Path) -> None:
    try:
        Rdict(str(generation), options()).close()  # fails while a live projection holds its LOCK
    except Exception:  # noqa: BLE001 - the live projection removes it after it switches
        log.info("rebuild: %s is still open by the live projection, which will remove it", generation.name)
        return
    shutil.rmtree(generation, ignore_errors=True)
