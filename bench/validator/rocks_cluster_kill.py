"""``python -m bench.validator.rocks_cluster_kill``: the rocksdb backend on a standalone cluster loses nothing when a worker dies.

Starts on 127.0.0.1 (free ports): a KRaft broker (unless ARBITER_KAFKA_BOOTSTRAP is set), a Spark master and
two workers of one core each, each with its own local rocks dir as two hosts would have
(``bench.validator.cluster``); preloads commands; runs ``python -m app.validator`` with
``ARBITER_STATE_BACKEND=rocksdb`` (small batches, back to back); once a fifth of the outcomes are out and both
workers hold shards, SIGKILLs the second worker's whole process group (worker, executor JVM, Python workers);
waits until every command has an
outcome; reports which of the dead worker's shards the survivor took over and what restoring each from the
checkpoint location cost (the shard servers' ``opens_log``); then checks the topics hold exactly what
``commands.decide`` predicts (identical duplicates allowed, none divergent, none missing). Everything it
started is stopped by PID.
``tests/integration/test_rocks_cluster.py`` runs it (~1 min).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.local.kafka_broker import LocalBroker, free_port
from app.settings import Settings
from app.topics import describe, ensure_topics
from app.validator.topic_io import produce, read_all
from bench.validator.cluster import ShardOpen, cluster_env, moves, shard_opens, start, start_cluster, stop
from bench.validator.rocks_cluster_placement import expected, job_env
from bench.validator.workload import commands as workload
from schemas import codec


@dataclass(frozen=True, slots=True)
class ClusterKill:
    """What one run saw: outcomes on the topics when the worker died, the shards the survivor took over (and
    what restoring each cost), and the final comparison with ``decide``."""

    commands: int
    written_at_kill: int
    records: int
    duplicates: int
    divergent: int
    missing: int
    seconds: float
    victim_shards: frozenset[int] = frozenset()
    taken_over: tuple[ShardOpen, ...] = ()

    @property
    def ok(self) -> bool:
        return self.divergent == 0 and self.missing == 0


def run(bootstrap: str | None, work: Path, say: Callable[[str], None] = print, *, tag: str = "rc") -> ClusterKill:
    """Run the scenario (module docstring) under ``work``; start a broker unless ``bootstrap`` is given.

    Raises ``RuntimeError`` (with the job's log tail) if the job ends or times out before every outcome is written.
    """
    broker, job, cluster = None, None, None
    t0 = time.monotonic()
    try:
        if not bootstrap:
            broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
            broker.start(Settings())
            bootstrap = broker.bootstrap
        cluster = start_cluster(work, 2)
        say(f"master {cluster.master_url} and two workers (own rocks dirs) up after {time.monotonic() - t0:.0f} s")

        s = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=4, topic_commands=f"{tag}-commands",
                     topic_events=f"{tag}-events", topic_rejections=f"{tag}-rejections")
        ensure_topics(s)
        cmds = list(workload(300, 3000))
        produce(s, [(c.object_id.encode(), codec.encode_command(c)) for c in cmds])
        run_env = {**job_env(cluster_env(work), s, cluster.master_url, 2, 200), "ARBITER_SNAPSHOT_EVERY": "3",
                   "ARBITER_SPARK_CONF": '{"spark.executor.memory": "768m", "spark.cores.max": "2", '
                                         '"spark.task.maxFailures": "8"}'}
        job = start([sys.executable, "-m", "app.validator"], work / "job.log", run_env)

        def outcomes() -> int:  # records on both output topics, duplicates included
            return sum(t.messages for t in describe(s, [s.topic_events, s.topic_rejections]))

        def failed(why: str) -> RuntimeError:
            return RuntimeError(f"{why}; job log tail:\n{(work / 'job.log').read_text()[-3000:]}")

        def held(root: Path) -> frozenset[int]:  # shards with a local database on that worker's disk
            return frozenset(int(d.name.removeprefix("shard-")) for d in root.glob("*/shard-*") if d.is_dir())

        deadline = time.monotonic() + 300
        while outcomes() < len(cmds) // 5 or not all(held(root) for root in cluster.rocks_dirs):
            if job.poll() is not None or time.monotonic() > deadline:
                raise failed("the job ended or timed out before a fifth of the outcomes, on both workers")
            time.sleep(0.1)
        before = outcomes()
        victim_shards = held(cluster.rocks_dirs[1])
        pgid = cluster.kill_worker(2)  # worker 2, its executor and that executor's Python workers
        say(f"killed worker 2 (pgid {pgid}) holding shards {sorted(victim_shards)} with {before} of {len(cmds)} "
            "outcomes written")
        want = expected(s, cmds)
        deadline = time.monotonic() + 600
        while True:
            got = [(r.topic, r.key, r.value, r.partition) for t in (s.topic_events, s.topic_rejections)
                   for r in read_all(s, t)]
            if want <= set(got) or set(got) - want:
                break
            if job.poll() is not None or time.monotonic() > deadline:
                raise failed(f"the job ended or timed out with {len(set(got) & want)} of {len(want)} outcomes")
            time.sleep(3)
        seconds = time.monotonic() - t0
        say(f"outcomes complete {seconds:.0f} s after start")
        taken = tuple(o for o in moves(shard_opens(s.path(s.var_dir))) if o.partition in victim_shards)
        for o in taken:
            say(f"shard {o.partition} taken over at batch {o.batch} by {o.server}: {o.source}, {o.ms} ms, "
                f"{o.bytes:,} bytes fetched")
        return ClusterKill(len(cmds), before, len(got), len(got) - len(set(got)), len(set(got) - want),
                           len(want - set(got)), seconds, victim_shards, taken)
    finally:
        if job is not None:
            stop(job)
        if cluster is not None:
            cluster.stop()
        if broker is not None:
            broker.stop()
        say(f"stopped everything started (total {time.monotonic() - t0:.0f} s); logs in {work}")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="arbiter-rocks-cluster-"))
    try:
        r = run(os.environ.get("ARBITER_KAFKA_BOOTSTRAP"), work, lambda line: print(line, flush=True))
    except RuntimeError as e:
        print(e)
        return 1
    print(f"the survivor took over {len(r.taken_over)} of the dead worker's shards {sorted(r.victim_shards)}")
    print(f"outcomes: {r.records} records ({r.duplicates} identical duplicates), {r.divergent} divergent, "
          f"{r.missing} missing: {'OK' if r.ok else 'FAILED'}")
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
