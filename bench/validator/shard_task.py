"""``python -m bench.validator.shard_task``: time one rocksdb shard task's Python path, without Spark or Kafka.

Pre-generates one partition's records (creates, updates, resent duplicates, stale-version updates and a few
misrouted records, keys routed with murmur2) as the Arrow batches ``mapInArrow`` hands a task, then runs the
task's Python (``shard_step``: Arrow rows → ``run_task`` → Arrow rows) over consecutive batches into a
temporary rocks dir and checkpoint. Prints µs/command and commands/s per core (process time) for the batches
after the first (state already in the shard), beside a same-run baseline that only decodes the same values.
``--profile`` prints the top of a cProfile of the last batch; ``--digest`` a hash of all outputs, to check
that a change keeps every byte; ``--against TREE`` times another checkout's validator modules too, alternating
runs in this one process, and fails if any run's outputs differ.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib.util
import pstats
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pyarrow as pa

from app.settings import Settings
from app.validator.fold import InputRecord
from app.validator.murmur2 import partition_for
from app.validator.rocks.query import shard_step
from bench.validator.workload import commands
from commands import UpdateObject
from schemas import codec

TOPIC = "commands"
NOW_MS = 1_750_000_000_000


def partition_records(objects: int, count: int, partitions: int, partition: int, seed: int) -> list[InputRecord]:
    """Return ``count`` records of ``partition``: the workload's commands on its keys plus a realistic rest.

    About 2 % are resent commands (DUPLICATE), 2 % updates naming a stale version (VERSION_CONFLICT) and
    0.5 % records whose key belongs to another partition (MISROUTED).
    """
    rng = random.Random(seed)
    cmds = []
    foreign = []
    for c in commands(objects * partitions, count * partitions * 2, seed):
        if partition_for(c.object_id.encode(), partitions) == partition:
            cmds.append(c)
        elif len(foreign) < count:
            foreign.append(c)
        if len(cmds) >= count:
            break
    out: list[InputRecord] = []
    offset = 0
    for c in cmds:
        r = rng.random()
        if r < 0.02 and out:
            prev = out[rng.randrange(len(out))]
            out.append(InputRecord(prev.key, prev.value, TOPIC, partition, offset))
            offset += 1
        elif r < 0.04 and isinstance(c, UpdateObject):
            c = replace(c, expected_version=1)
        elif r < 0.045 and foreign:
            f = foreign.pop()
            out.append(InputRecord(f.object_id.encode(), codec.encode_command(f), TOPIC, partition, offset))
            offset += 1
        out.append(InputRecord(c.object_id.encode(), codec.encode_command(c), TOPIC, partition, offset))
        offset += 1
    return out[:count]


def to_arrow(records: list[InputRecord]) -> pa.RecordBatch:
    """Return ``records`` as the Arrow batch Spark's ``mapInArrow`` hands the shard step."""
    return pa.RecordBatch.from_arrays(
        [pa.array([r.key for r in records], pa.binary()), pa.array([r.value for r in records], pa.binary()),
         pa.array([r.topic for r in records], pa.string()), pa.array([r.partition for r in records], pa.int32()),
         pa.array([r.offset for r in records], pa.int64())], names=["key", "value", "topic", "partition", "offset"])


def baseline(records: list[InputRecord]) -> float:
    """Return process seconds to iterate ``records`` and decode each value (the floor any shard task pays)."""
    start = time.process_time()
    for r in records:
        codec.decode_command(r.value)
    return time.process_time() - start


def other_shard_step(tree: Path) -> Callable[..., Iterator[pa.RecordBatch]]:
    """Return ``shard_step`` as another checkout (``tree``) of the validator's own modules defines it.

    Only ``murmur2``, ``decode``, ``fold``, ``rocks/shard`` and ``rocks/query`` (``rocks/job`` before
    the move of issue 23) come from ``tree``, wired to each
    other; the domain, the codec and the rest are this checkout's. For a same-process before/after comparison.
    """
    def load(name: str, rel: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"_against_{name}", tree / "app/validator" / rel)
        assert spec is not None and spec.loader is not None
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
        return module

    murmur2 = load("murmur2", "murmur2.py")
    decode = load("decode", "decode.py")
    decode.partition_for = murmur2.partition_for
    fold = load("fold", "fold.py")
    fold.to_command, fold.InputRecord = decode.to_command, InputRecord
    shard = load("shard", "rocks/shard.py")
    shard.fold, shard.limits_for, shard.InputRecord = fold.fold, fold.limits_for, InputRecord
    job = load("job", "rocks/query.py" if (tree / "app/validator/rocks/query.py").exists() else "rocks/job.py")
    job.run_task, job.InputRecord = shard.run_task, InputRecord
    step: Callable[..., Iterator[pa.RecordBatch]] = job.shard_step
    return step


def run(arrow: list[pa.RecordBatch], partitions: int, profile: str | None, digest: hashlib._Hash | None,
        step: Callable[..., Iterator[pa.RecordBatch]] = shard_step) -> list[float]:
    """Run every batch through ``step`` in a fresh rocks dir; return each batch's process seconds."""
    times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="arbiter-shard-bench-") as tmp:
        settings = Settings(partitions=partitions, var_dir=Path(tmp) / "var", snapshot_every=10_000)
        ckpt = str(Path(tmp) / "ckpt")
        for b, batch in enumerate(arrow):
            prof = cProfile.Profile() if profile and b == len(arrow) - 1 else None
            start = time.process_time()
            if prof is not None:
                prof.enable()
            out = list(step(settings, ckpt, b, NOW_MS + b * 1000, iter([batch])))
            if prof is not None:
                prof.disable()
            times.append(time.process_time() - start)
            if digest is not None:
                for row in out[0].to_pylist():
                    digest.update(b"%s|%s|%s|%d;" % (row["topic"].encode(), row["key"] or b"-", row["value"],
                                                     row["partition"]))
            if prof is not None:
                pstats.Stats(prof).sort_stats(profile).print_stats(25)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=12_500, help="objects per partition")
    p.add_argument("--batch", type=int, default=12_500, help="records per batch (one shard task)")
    p.add_argument("--batches", type=int, default=4, help="batches; the first (empty state) is not timed")
    p.add_argument("--repeat", type=int, default=3, help="runs, each in a fresh rocks dir; per batch the fastest counts")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--profile", metavar="SORT", help="cProfile the last batch of the first run (e.g. tottime)")
    p.add_argument("--digest", action="store_true", help="print a SHA-256 of the first run's outputs")
    p.add_argument("--against", type=Path, metavar="TREE",
                   help="also time another checkout's validator modules, alternating runs in this process")
    a = p.parse_args()

    records = partition_records(a.objects, a.batch * a.batches, a.partitions, 0, a.seed)
    arrow = [to_arrow(records[i:i + a.batch]) for i in range(0, len(records), a.batch)]
    steps = {"shard task": shard_step}
    if a.against is not None:
        steps[f"shard task ({a.against})"] = other_shard_step(a.against)
    runs: dict[str, list[list[float]]] = {name: [] for name in steps}
    digests: set[str] = set()
    for r in range(a.repeat):
        for name in list(steps)[::1 if r % 2 == 0 else -1]:  # alternate who goes first
            first = r == 0 and name == "shard task"
            run_digest = hashlib.sha256() if a.against is not None or first else None
            runs[name].append(run(arrow, a.partitions, a.profile if first else None, run_digest, steps[name]))
            if run_digest is not None:
                digests.add(run_digest.hexdigest())
    if len(digests) > 1:
        raise SystemExit(f"outputs differ between runs: {sorted(digests)}")
    timed = records[a.batch:]
    base = min(baseline(timed) for _ in range(a.repeat)) / len(timed)
    for name, times in runs.items():
        best = [min(t) for t in zip(*times, strict=True)]
        per = sum(best[1:]) / len(timed)
        runs_per = sorted(sum(t[1:]) / len(timed) * 1e6 for t in times)
        print(f"{name}: {per * 1e6:.1f} µs/command, {1 / per:,.0f} commands/s per core ({len(timed):,} commands in "
              f"{len(arrow) - 1} batches of {a.batch:,}; process time, per batch the best of {a.repeat} runs; "
              f"median run {runs_per[len(runs_per) // 2]:.1f} µs); empty-state batch {best[0] * 1e6 / a.batch:.1f} "
              f"µs/command (not counted); ÷ baseline = {per / base:.2f}")
    print(f"baseline (decode values only): {base * 1e6:.1f} µs/command")
    if a.digest:
        print(f"outputs sha256: {digests.pop()}{' (identical in every run)' if a.against is not None else ''}")


if __name__ == "__main__":
    main()
