"""``python -m bench.archive --commands 1000000 --objects 1000000 [--rebuild]``: the archive's cost in one run.

Preloads the commands once on a throwaway broker (or ``--bootstrap``), then, in one Spark session on ``--master``
(the archive's default, ``local[1]``, so each figure is one core's), drains them in turn (trigger availableNow):

1. the rocksdb validator, into events and rejections topics of its own;
2. Spark's own Kafka → Kafka pass-through of the commands (no Python: the ceiling of a Spark query here);
3. the archive (``app.archive.query``) of the commands, the validator's events and rejections, and the parked
   topic, into Parquet under a work directory.

For each: records/s over the whole drain and CPU seconds per 1M records (the Spark JVM, its Python workers and
the shard servers: everything but the broker and this process), then the archive's ratios to the other two.
``--rebuild`` then times ``arbiter project db --rebuild --from-archive`` (RocksDB read model) over the archive:
the restore time of a read model at ``--objects`` objects. ``--idle S`` first measures what the archive costs as
``arbiter run``'s component with its defaults: ``arbiter archive run`` as a process of its own on empty topics,
its start-up, then CPU seconds and RSS of its process tree over ``S`` idle seconds. Counts are checked, never assumed.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.archive.query import kinds, start
from app.read_models import open_reader, rebuild_target
from app.run.supervisor import arbiter_argv
from app.settings import Settings
from app.spark_session import spark_session
from app.topics import describe, ensure_lease_topic, ensure_topics
from app.validator.topic_io import produce
from bench.harness import bootstrap_for
from bench.peer.cpu import by_component, delta
from bench.pipeline.cpu import process_table, tree_seconds
from bench.validator.__main__ import run_backend, spark_passthrough
from bench.validator.rocks_restart import tree_rss
from bench.validator.workload import records
from projections import archived
from projections.rebuild import rebuild_read_model
from projections.runner import RunnerConfig

SPARK_PARTS = ("spark_jvm", "python_workers", "shard_servers")  # what a Spark query costs here


def measured(what: Callable[[], Any]) -> tuple[Any, float, dict[str, float]]:  # noqa: ANN401
    """Run ``what``; return its result, wall seconds and CPU seconds by component."""
    before, t = by_component(), time.perf_counter()
    out = what()
    return out, time.perf_counter() - t, delta(before, by_component())


def line(name: str, records_n: int, seconds: float, cpu: dict[str, float]) -> tuple[float, float]:
    """Print one result; return (records/s, Spark CPU seconds per 1M records)."""
    spark_cpu = sum(cpu.get(k, 0.0) for k in SPARK_PARTS)
    rate, per_m = records_n / seconds, spark_cpu / records_n * 1e6
    parts = ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if v)
    print(f"{name}: {records_n:,} records in {seconds:.1f} s, {rate:,.0f} records/s, "
          f"{per_m:,.1f} CPU s per 1M records (Spark JVM + Python workers + shard servers; by component: {parts})")
    return rate, per_m


def archive_once(spark: Any, s: Settings) -> int:  # noqa: ANN401
    """Archive what the topics hold (availableNow); return the rows the archive holds, checked against the topics."""
    start(spark, s, available_now=True).awaitTermination()
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in archived.files(archived.local_root(s.archive_location)))
    held = sum(t.messages for t in describe(s, list(kinds(s))))
    if rows != held:
        raise SystemExit(f"archive: {rows} rows for {held} records on the topics")
    return rows


def rebuild(s: Settings) -> tuple[int, float]:
    """Rebuild the RocksDB read model from the archive, then Kafka; return (objects, seconds)."""
    cfg = RunnerConfig(bootstrap=s.kafka_bootstrap, topics=(s.topic_events,), group_id=f"bench-{uuid.uuid4().hex[:6]}")
    t = time.perf_counter()
    res = rebuild_read_model(cfg, rebuild_target(s), archived.local_root(s.archive_location))
    seconds = time.perf_counter() - t
    reader = open_reader(s)
    try:
        objects = sum(1 for _ in reader.views())
    finally:
        reader.close()
    print(f"rebuild from the archive: {objects:,} objects, {res.archived:,} events from the archive and "
          f"{res.stats.records:,} from Kafka in {seconds:.1f} s ({res.archived / seconds:,.0f} events/s)")
    return objects, seconds


def idle_cost(s: Settings, work: Path, seconds: float) -> None:
    """Run ``arbiter archive run`` (its defaults: local[1], a batch a minute) on empty topics; print its cost."""
    tag = uuid.uuid4().hex[:6]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")},
           "ARBITER_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "ARBITER_PARTITIONS": str(s.partitions),
           "ARBITER_TOPIC_COMMANDS": f"idle-commands-{tag}", "ARBITER_TOPIC_EVENTS": f"idle-events-{tag}",
           "ARBITER_TOPIC_REJECTIONS": f"idle-rejections-{tag}", "ARBITER_VAR_DIR": str(work / f"idle-{tag}")}
    ensure_topics(s.model_copy(update={"topic_commands": env["ARBITER_TOPIC_COMMANDS"],
                                       "topic_events": env["ARBITER_TOPIC_EVENTS"],
                                       "topic_rejections": env["ARBITER_TOPIC_REJECTIONS"]}))
    log_path = work / f"idle-{tag}.log"
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(arbiter_argv("archive", "run"), env=env, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603
                                start_new_session=True)
    try:
        progress = Path(env["ARBITER_VAR_DIR"]) / "status" / "archive-progress.json"
        while not progress.exists():  # its first (empty) batch is done: the query is idle from here
            if proc.poll() is not None or time.monotonic() - t0 > 300:
                raise SystemExit(f"archive did not start: see {log_path}")
            time.sleep(0.2)
        started = time.monotonic() - t0
        before = tree_seconds(proc.pid, process_table())
        time.sleep(seconds)
        cpu, rss = tree_seconds(proc.pid, process_table()) - before, tree_rss(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    print(f"archive component (arbiter archive run, local[1], trigger 1 minute), idle: first batch done "
          f"{started:.1f} s after start; {cpu:.1f} CPU s over {seconds:g} s ({cpu / seconds * 100:.1f} % of a core); "
          f"RSS of its process tree {rss / 2**20:,.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.archive")
    ap.add_argument("--commands", type=int, default=200_000)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--master", default=Settings.model_fields["archive_spark_master"].default,
                    help="Spark master of the one session every query runs in (default: the archive's, local[1])")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    ap.add_argument("--rebuild", action="store_true", help="also time a rebuild of the read model from the archive")
    ap.add_argument("--idle", type=float, default=0, metavar="S",
                    help="also measure the archive component's idle CPU and RSS over S seconds")
    ap.add_argument("--bootstrap", default=None, help="an existing broker; default: start one on free ports")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-archive-"))
    with bootstrap_for(args.bootstrap, work) as bootstrap:
        tag = uuid.uuid4().hex[:6]
        s = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=args.partitions,
                     spark_master=args.master, topic_commands=f"bench-commands-{tag}",
                     topic_events=f"bench-pass-{tag}", topic_rejections=f"bench-unused-{tag}",
                     max_offsets_per_trigger=args.max_offsets_per_trigger, archive_uri=str(work / "archive"))
        ensure_topics(s)
        ensure_lease_topic(s)
        if args.idle:
            idle_cost(s, work, args.idle)
        recs = records(args.objects, args.commands)
        t = time.perf_counter()
        produce(s, recs)
        n = len(recs)
        print(f"preloaded {n:,} commands on {len({k for k, _ in recs}):,} objects in {time.perf_counter() - t:.1f} s, "
              f"{args.partitions} partitions; every query below in one Spark session on {args.master}")
        spark = spark_session(s, app_name="arbiter-bench-archive", extra_conf={"spark.ui.showConsoleProgress": "false"})
        try:
            keep: dict[str, Settings] = {}
            _, secs, cpu = measured(lambda: run_backend(spark, s, "rocksdb", n, keep))
            validator = line("validator (rocksdb)", n, secs, cpu)
            _, secs, cpu = measured(lambda: spark_passthrough(spark, s, n))
            passthrough = line("spark pass-through (Kafka -> Kafka, no Python)", n, secs, cpu)
            a = keep["settings"].model_copy(update={"archive_uri": s.archive_uri})
            rows, secs, cpu = measured(lambda: archive_once(spark, a))
            arch = line(f"archive (commands, events, rejections, parked -> Parquet, {a.partitions} partitions)",
                        rows, secs, cpu)
        finally:
            spark.stop()
        for name, other in (("spark pass-through", passthrough), ("validator", validator)):
            print(f"archive / {name}: {arch[0] / other[0]:.2f}x the records/s, {arch[1] / other[1]:.2f}x the CPU "
                  "per record")
        if args.rebuild:
            rebuild(a)
        print(f"(work directory {work})")


if __name__ == "__main__":
    main()
