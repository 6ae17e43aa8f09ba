"""The reference backend's rules: each partition's control records, kept beside Spark's state in the checkpoint.

Spark's state store is keyed by object, and an object's group never sees the control records of its partition,
so the version in force cannot live in it. Instead a stateless step before the shuffle (``RulesTagger``, one
task per topic partition in offset order, as the Kafka source reads it) applies each control record with
``app.validator.rules.control_step``, writes every switch to ``<checkpoint>/rules/partition-<p>/<offset>.json``
(the partition's timeline: what the shard has seen, version by version, and from which offset), and tags each row
with the version in force at its offset. The files are written before the shuffle, hence before the batch
commits; a replayed batch finds its own switches already there (one file per offset, the same bytes), and the
version at offset ``o`` only reads switches below ``o``: a replay, a restart or a restore tags every row alike.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row

from app.limits import size_limits
from app.rules.control import decode_control, is_control
from app.settings import Settings
from app.validator.fold import InputRecord
from app.validator.outputs import outcome_record
from app.validator.rocks.checkpoint import filesystem_of
from app.validator.rules import NO_RULES, ShardRules, control_step, rules_checker

Timeline = list[tuple[int, int, str]]  # (offset, version, canonical document), by offset


class Timelines:
    """Read and write the rules timelines of one checkpoint."""

    def __init__(self, checkpoint: str) -> None:
        self.fs, root = filesystem_of(checkpoint)
        self.base = f"{root.rstrip('/')}/rules"

    def _dir(self, partition: int) -> str:
        return f"{self.base}/partition-{partition:04d}"

    def read(self, partition: int) -> Timeline:
        """Return the partition's switches, oldest first (empty when it never switched)."""
        from pyarrow import fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self._dir(partition), allow_not_found=True))
        out: Timeline = []
        for info in infos:
            name = info.base_name
            if info.type != pafs.FileType.File or not name.endswith(".json") or not name[:-5].isdigit():
                continue
            with self.fs.open_input_stream(info.path) as f:
                deploy = decode_control(f.read())
            out.append((int(name[:-5]), deploy.version, deploy.document))
        return sorted(out)

    def write(self, partition: int, offset: int, value: bytes) -> None:
        """Record the switch at ``offset`` (the control record's value); a second write of it changes nothing."""
        self.fs.create_dir(self._dir(partition), recursive=True)
        path = f"{self._dir(partition)}/{offset:020d}.json"
        tmp = f"{path}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(value)
        self.fs.move(tmp, path)


def rules_at(timeline: Timeline, offset: int) -> ShardRules:
    """Return the shard's rules just before ``offset``: every switch below it, the newest in force."""
    seen = [(v, d) for o, v, d in timeline if o < offset]
    if not seen:
        return NO_RULES
    return ShardRules(dict(seen), seen[-1][0])


def documents(timeline: Timeline) -> ShardRules:
    """Return every version of the timeline (for deciding commands tagged with one of them)."""
    return ShardRules({v: d for _, v, d in timeline}, timeline[-1][1] if timeline else None)


RULES_COLUMN = "rules"


class RulesTagger:
    """The ``mapInArrow`` step before the shuffle: apply control records, tag every row with its rules version."""

    def __init__(self, settings: Settings, checkpoint: str) -> None:
        self.settings = settings.for_tasks()
        self.checkpoint = checkpoint

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = Timelines(self.checkpoint)
        known: dict[int, Timeline] = {}
        for batch in batches:
            yield self.tag(batch, store, known)

    def tag(self, batch: pa.RecordBatch, store: Timelines, known: dict[int, Timeline]) -> pa.RecordBatch:
        """Return ``batch`` with the ``rules`` column; write the switches its control records make."""
        n = batch.num_rows
        if not n:
            return batch.append_column(RULES_COLUMN, pa.nulls(0, pa.int64()))
        present = pc.unique(batch.column("partition")).to_pylist()
        for p in present:
            if p not in known:
                known[p] = store.read(p)
        controls = batch.column("control")
        if controls.null_count == n:
            if not any(known[p] for p in present):
                return batch.append_column(RULES_COLUMN, pa.nulls(n, pa.int64()))  # no rules anywhere: nothing to tag
            if len(present) == 1 and known[present[0]][-1][0] < pc.min(batch.column("offset")).as_py():
                # the common case with rules: one partition, no switch at or after this batch's first offset
                version = known[present[0]][-1][1]
                return batch.append_column(RULES_COLUMN, pa.array([version] * n, pa.int64()))
        partitions = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        flags = pc.is_valid(controls).to_pylist()
        checker = rules_checker(self.settings)
        keep = size_limits(self.settings.max_message_bytes).keep_bytes
        versions: list[int | None] = []
        for i in range(n):
            p, o = partitions[i], offsets[i]
            timeline = known[p]
            if flags[i] and is_control(controls[i].as_py()):
                rules = rules_at(timeline, o)
                row = batch.slice(i, 1).to_pylist()[0]
                step = control_step(rules, row["key"], row["value"], row["signature"], row["topic"], p, o, checker,
                                    keep)
                if step.deploy is not None and all(e[0] != o for e in timeline):
                    store.write(p, o, row["value"])
                    known[p] = sorted([*timeline, (o, step.deploy.version, step.deploy.document)])
                versions.append(rules.active)
                continue
            at = bisect_left(timeline, (o,)) - 1  # the newest switch below o
            versions.append(timeline[at][1] if at >= 0 else None)
        return batch.append_column(RULES_COLUMN, pa.array(versions, pa.int64()))


_cache: dict[tuple[str, int], Timeline] = {}


def partition_rules(checkpoint: str, records: list[InputRecord]) -> ShardRules:
    """Return every rules version of the records' partitions (re-read when a record names one not cached)."""
    wanted = {r.rules for r in records if r.rules is not None}
    merged: dict[int, str] = {}
    for p in {r.partition for r in records}:
        timeline = _cache.get((checkpoint, p))
        if timeline is None or not wanted <= {v for _, v, _ in timeline}:
            timeline = _cache[(checkpoint, p)] = Timelines(checkpoint).read(p)
        merged.update((v, d) for _, v, d in timeline)
    return ShardRules(merged, None)


def control_rows(controls: list[InputRecord], settings: Settings, checkpoint: str) -> Iterator[Row]:
    """Yield the sink rows of control records: each applied to its partition's rules just before its offset."""
    store = Timelines(checkpoint)
    checker = rules_checker(settings)
    keep = size_limits(settings.max_message_bytes).keep_bytes
    timelines: dict[int, Timeline] = {}
    for r in sorted(controls, key=lambda r: (r.partition, r.offset)):
        if r.partition not in timelines:
            timelines[r.partition] = store.read(r.partition)
        step = control_step(rules_at(timelines[r.partition], r.offset), r.key, r.value, r.signature, r.topic,
                            r.partition, r.offset, checker, keep)
        if step.outcome is not None:
            topic, k, v, p, h = outcome_record(step.outcome, settings, r.partition)
            yield Row(topic=topic, key=k, value=v, partition=p, headers=h)
