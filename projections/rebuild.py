"""Rebuild the read model: replay the events topic from the beginning into a fresh store, swap it in when caught up."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from projections import archived
from projections.db.port import RebuildTarget
from projections.db.projection import DbCounts, DbProjection
from projections.runner import Item, Record, Runner, RunnerConfig, RunStats
from schemas import codec
from schemas.codec import DecodeError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RebuildResult:
    generation: str
    stats: RunStats
    counts: DbCounts
    seconds: float
    archived: int = 0  # records folded from the archive before Kafka took over


def rebuild_read_model(config: RunnerConfig, target: RebuildTarget, archive: Path | None = None) -> RebuildResult:
    """Fill a fresh store from offset 0 of every partition until caught up, then swap it in atomically.

    A running DB projection keeps serving from the old store meanwhile; after the swap it notices, moves to the
    new store, seeks to its stored offsets and (RocksDB) removes the old generation. Readers follow on their next
    read (PostgreSQL) or refresh (RocksDB); none sees a half-built model.

    With ``archive`` (a local archive root, ``projections.archived``), the events it holds are folded first, in
    (partition, offset) order and stored with their offsets; the runner then resumes every partition at the next
    offset after the archive's. Before that, each partition's archived offsets must run from 0 without a hole and
    Kafka must still hold the next one (its log start offset at most the archive's end): else ``ArchiveGap``,
    and the fresh store is never swapped in.
    """
    started = time.monotonic()
    projection = DbProjection(target.fresh(), follow_swaps=False)
    cfg = replace(config, group_id=f"{config.group_id}-rebuild", assign_all=True, stop_when_caught_up=True)
    folded = 0
    if archive is not None:
        try:
            folded = _fold_archive(cfg, projection, archive)
        except BaseException:
            projection.close()
            raise
    stats = Runner(cfg, projection).run()  # closes the store: durable before it becomes visible
    name = target.swap_in()
    log.info("rebuild: %s swapped in (%d records, %d applied) in %.1fs", name, stats.records,
             projection.counts.applied, time.monotonic() - started)
    return RebuildResult(name, stats, projection.counts, time.monotonic() - started, folded)


def _fold_archive(cfg: RunnerConfig, projection: DbProjection, root: Path) -> int:
    """Apply the archived events of ``cfg.topics`` to ``projection``; return how many; check the hand-over."""
    n = 0
    for topic in cfg.topics:
        parts, offsets, stamps, keys, values = archived.read_topic(root, topic)
        nexts = archived.ends(parts, offsets, topic)
        _check_handover(cfg, topic, nexts)
        for i in range(0, len(parts), cfg.batch_size):
            items = []
            for j in range(i, min(i + cfg.batch_size, len(parts))):
                rec = Record(topic, parts[j], offsets[j], keys[j], values[j], stamps[j])
                try:
                    items.append(Item(rec, codec.decode_outcome(values[j] or b"")))
                except DecodeError as e:
                    items.append(Item(rec, None, f"{e.reason.value}: {e}"))
            projection.apply(items)
            n += len(items)
        log.info("rebuild: folded %d archived records of %s; Kafka from %s", len(parts), topic,
                 {p: o for p, o in sorted(nexts.items())})
    return n


def _check_handover(cfg: RunnerConfig, topic: str, nexts: dict[int, int]) -> None:
    """Raise ``ArchiveGap`` if Kafka no longer holds the offset after the archive's end of some partition."""
    consumer = Consumer({"bootstrap.servers": cfg.bootstrap, "group.id": f"{cfg.group_id}-handover", "log_level": 0,
                         **{k: v for k, v in cfg.kafka_config.items() if not k.startswith("fetch.")}})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        for p in sorted(meta.partitions):
            low, _high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            if low > nexts.get(p, 0):
                raise archived.ArchiveGap(
                    f"{topic}[{p}]: the archive ends before offset {nexts.get(p, 0)} but Kafka starts at {low}: "
                    f"offsets {nexts.get(p, 0)}..{low - 1} are in neither (run the archive query until it has caught up)")
    finally:
        consumer.close()
