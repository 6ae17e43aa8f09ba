"""``python -m bench.validator.rocks_cluster_placement``: shard moves, restores, throughput on 1 vs 2 workers.

For each cluster size (``--workers 1,2,2c``; ``c``: the tasks coalesced to one per core, the placement before
issue 18, for comparison): a standalone master and one-core workers on 127.0.0.1, each with
its own local rocks dir (``bench.validator.cluster``: as hosts with their own disks), one checkpoint location
shared by all; ``--commands`` preloaded on ``--partitions`` partitions; ``python -m app.validator
--available-now`` (rocksdb backend) drains them in batches of ``--batch`` offsets. Then it reports:

- per batch, the shards that moved to another worker and the restore each cost (from the shard servers'
  ``opens_log``), split into the start (the first ``--warmup`` batches, while executors register) and the
  steady state after it;
- throughput: all commands over the span from the first batch's offset entry to the last commit, and steady
  (the batches after the warm-up, from the commit before them to the last), with 1 worker as the baseline in
  the same run (ratio); batch latency (offset log entry to commit);
- that the outputs are exactly what ``commands.decide`` predicts.

The broker is a throwaway one unless ``ARBITER_KAFKA_BOOTSTRAP`` is set. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from app.settings import Settings
from app.topics import ensure_topics
from app.validator.fold import limits_for
from app.validator.murmur2 import partition_for
from app.validator.topic_io import produce, read_all
from bench.harness import bootstrap_for
from bench.validator.batch_cost import batches
from bench.validator.cluster import ShardOpen, cluster_env, moves, shard_opens, start_cluster
from bench.validator.workload import commands as workload
from commands import Event, decide
from schemas import codec


@dataclass(frozen=True, slots=True)
class Placement:
    """One cluster size's run."""

    workers: int
    coalesced: bool
    commands: int
    batches: int
    span_s: float
    batch_ms: list[float]
    opens: list[ShardOpen]
    moved: list[ShardOpen]
    warmup: int
    exact: bool
    steady_rows: int
    steady_s: float

    @property
    def rate(self) -> float:
        return self.commands / self.span_s if self.span_s > 0 else float("nan")

    @property
    def steady_rate(self) -> float:
        """Commands/s over the batches after the warm-up: from the commit before the first to the last commit."""
        return self.steady_rows / self.steady_s if self.steady_s > 0 else float("nan")

    def steady_moves(self) -> list[ShardOpen]:
        return [o for o in self.moved if o.batch >= self.warmup]


def job_env(env: dict[str, str], s: Settings, master_url: str, workers: int, batch: int,
            coalesced: bool = False) -> dict[str, str]:
    """Return the validator job's environment: the rocksdb backend on the cluster, ``batch``-offset batches."""
    tasks = {"ARBITER_SHARD_TASKS": str(workers)} if coalesced else {}
    return {**env, **tasks, "ARBITER_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "ARBITER_VAR_DIR": str(s.var_dir),
            "ARBITER_PARTITIONS": str(s.partitions), "ARBITER_TOPIC_COMMANDS": s.topic_commands,
            "ARBITER_TOPIC_EVENTS": s.topic_events, "ARBITER_TOPIC_REJECTIONS": s.topic_rejections,
            "ARBITER_SPARK_MASTER": master_url, "ARBITER_STATE_BACKEND": "rocksdb",
            "ARBITER_MAX_OFFSETS_PER_TRIGGER": str(batch), "ARBITER_TRIGGER_INTERVAL": "0 seconds",
            "ARBITER_SPARK_CONF": json.dumps({"spark.executor.memory": "768m", "spark.cores.max": str(workers)})}


def expected(s: Settings, cmds: list) -> set[tuple[str, bytes, bytes, int]]:  # type: ignore[type-arg]
    """Return the outcome records ``commands.decide`` predicts for ``cmds`` in order."""
    limits, states, want = limits_for(s), {}, set()
    for c in cmds:
        d = decide(states.get(c.object_id), c, limits)
        states[c.object_id] = d.state
        topic = s.topic_events if isinstance(d.outcome, Event) else s.topic_rejections
        want.add((topic, c.object_id.encode(), codec.encode_outcome(d.outcome),
                  partition_for(c.object_id.encode(), s.partitions)))
    return want


def run_one(bootstrap: str, work: Path, workers: int, coalesced: bool, args: argparse.Namespace) -> Placement:
    """Run the scenario on a fresh cluster of ``workers`` workers under ``work``."""
    work.mkdir(parents=True)
    cluster = start_cluster(work, workers)
    try:
        tag = f"pl{workers}-{work.name}"
        s = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=args.partitions,
                     topic_commands=f"{tag}-commands", topic_events=f"{tag}-events",
                     topic_rejections=f"{tag}-rejections")
        ensure_topics(s)
        cmds = list(workload(args.objects, args.commands))
        produce(s, [(c.object_id.encode(), codec.encode_command(c)) for c in cmds])
        t0 = time.time()
        job = subprocess.run([sys.executable, "-m", "app.validator", "--available-now", "--timeout", "900"],
                             env=job_env(cluster_env(work), s, cluster.master_url, workers, args.batch, coalesced),
                             capture_output=True, text=True, timeout=1200, check=False)
        if job.returncode != 0:
            raise RuntimeError(f"the validator exited {job.returncode}:\n{job.stderr[-4000:]}")
        ckpt = s.path(s.var_dir) / "checkpoints" / "validator"
        commits = sorted(c.stat().st_mtime for c in (ckpt / "commits").glob("[0-9]*"))
        firsts = sorted(o.stat().st_mtime for o in (ckpt / "offsets").glob("[0-9]*"))
        durations = sorted(batches(ckpt, t0, time.time() + 1))
        got = {(r.topic, r.key, r.value, r.partition) for t in (s.topic_events, s.topic_rejections)
               for r in read_all(s, t)}
        opens = shard_opens(s.path(s.var_dir))
        rows = batch_rows(ckpt)
        last = max(rows)
        steady = sum(n for b, n in rows.items() if b >= args.warmup)
        span = (ckpt / "commits" / str(last)).stat().st_mtime - (ckpt / "commits" / str(args.warmup - 1)).stat().st_mtime
        return Placement(workers, coalesced, len(cmds), len(commits), commits[-1] - firsts[0], durations, opens,
                         moves(opens), args.warmup, got == expected(s, cmds), steady, span)
    finally:
        cluster.stop()


def batch_rows(checkpoint: Path) -> dict[int, int]:
    """Return the commands each committed batch read: the growth of its offset log entry's end offsets."""
    ends: dict[int, int] = {}
    for f in (checkpoint / "offsets").glob("[0-9]*"):
        topics = json.loads(f.read_text().split("\n")[2])
        ends[int(f.name)] = sum(int(o) for parts in topics.values() for o in parts.values())
    committed = {int(c.name) for c in (checkpoint / "commits").glob("[0-9]*")}
    return {b: ends[b] - ends.get(b - 1, 0) for b in sorted(ends) if b in committed}


def _pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] * 1000 if values else float("nan")


def report(runs: list[Placement]) -> list[str]:
    """Return the result lines: per run, the batches in which shards moved; then the table, one row per run."""
    lines = []
    for r in runs:
        by_batch: dict[int, list[ShardOpen]] = {}
        for o in r.moved:
            by_batch.setdefault(o.batch, []).append(o)
        for batch, opens in sorted(by_batch.items()):
            lines.append(f"  {r.workers}{'c' * r.coalesced} workers, batch {batch}: shards "
                         f"{','.join(str(o.partition) for o in opens)} moved ("
                         f"{', '.join(f'{o.source} {o.ms} ms {o.bytes / 1024:,.0f} KiB' for o in opens)})")
    base = runs[0]
    lines += ["| workers | batches | commands/s (all) | steady commands/s | vs 1 worker | batch p50 / p99 ms "
              "| shard opens | moves (start) | moves (steady) | restore ms per move (p50 / max) | exact |",
              "|---|---:|---:|---:|---:|---|---:|---:|---:|---|---|"]
    for r in runs:
        ms = sorted(o.ms for o in r.moved)
        restore = f"{ms[len(ms) // 2]} / {ms[-1]}" if ms else "–"
        name = f"{r.workers}{' (coalesced)' if r.coalesced else ''}"
        lines.append(f"| {name} | {r.batches} | {r.rate:,.0f} | {r.steady_rate:,.0f} | "
                     f"{r.steady_rate / base.steady_rate:.2f} | "
                     f"{_pct(r.batch_ms, 0.5):.0f} / {_pct(r.batch_ms, 0.99):.0f} | {len(r.opens)} | "
                     f"{len(r.moved) - len(r.steady_moves())} | {len(r.steady_moves())} | {restore} | {r.exact} |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.validator.rocks_cluster_placement", description=__doc__.split("\n")[0])
    p.add_argument("--workers", default="1,2,2c", help="cluster sizes, in order; the first is the baseline; "
                   "a 'c' suffix coalesces the tasks to one per core (the placement before issue 18)")
    p.add_argument("--commands", type=int, default=60_000)
    p.add_argument("--objects", type=int, default=6_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--batch", type=int, default=2_000, help="maxOffsetsPerTrigger")
    p.add_argument("--warmup", type=int, default=2, help="batches counted as start-up (executors registering)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arbiter-placement-"))
    runs = []
    with bootstrap_for(os.environ.get("ARBITER_KAFKA_BOOTSTRAP"), root) as bootstrap:
        for w in args.workers.split(","):
            n, coalesced = int(w.rstrip("c")), w.endswith("c")
            runs.append(run_one(bootstrap, root / f"w{w}", n, coalesced, args))
            print(f"{w} worker(s): {runs[-1].batches} batches, {runs[-1].rate:,.0f} commands/s, "
                  f"{len(runs[-1].moved)} moves", flush=True)
    print("\n".join(report(runs)))
    print(f"work dir: {root}")
    return 0 if all(r.exact for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
