"""``python -m bench.validator.rocks_restart --objects 1000000``: rocksdb backend restart time and peak RSS.

Seeds a checkpoint with a short real run, bulk-loads ``--objects`` object states into the shards (offline,
the same bytes the job writes) and uploads a snapshot of each, then times ``python -m app.validator
--available-now`` from process start to the first outcome on the events topic (broker to broker), twice:
after a clean stop, and after deleting the local state directory (restore from the checkpoint location).
Peak RSS is the highest sum of the job's process tree (driver, JVM, Python workers), sampled every 100 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import rocksdict
from confluent_kafka import Consumer, KafkaException, TopicPartition

from app.settings import Settings, checkpoint_uri
from app.topics import ensure_topics
from app.validator.lock import FileLock
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import STATE, open_shard, rocks_root, shard_dir
from app.validator.topic_io import produce
from bench.harness import bootstrap_for
from commands import CreateObject, ObjectState
from schemas import codec

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def tree_rss(root: int) -> int:
    """Return the summed RSS in bytes of ``root`` and all its descendants."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parents[int(d)] = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    family, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p and c not in family]
        family.update(kids)
        frontier += kids
    total = 0
    for p in family:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def events_written(s: Settings) -> int:
    c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "bench", "log_level": 0})
    try:
        for _ in range(50):  # a topic created a moment ago may not have a leader yet
            try:
                return sum(c.get_watermark_offsets(TopicPartition(s.topic_events, p), timeout=5)[1]
                           for p in range(s.partitions))
            except KafkaException:
                time.sleep(0.2)
        raise SystemExit(f"no watermarks for {s.topic_events}")
    finally:
        c.close()


def env_of(s: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env.update({"ARBITER_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "ARBITER_PARTITIONS": str(s.partitions),
                "ARBITER_TOPIC_COMMANDS": s.topic_commands, "ARBITER_TOPIC_EVENTS": s.topic_events,
                "ARBITER_TOPIC_REJECTIONS": s.topic_rejections, "ARBITER_VAR_DIR": str(s.var_dir),
                "ARBITER_STATE_BACKEND": "rocksdb", "ARBITER_SPARK_MASTER": s.spark_master,
                "ARBITER_ROCKS_MEMORY_MB": str(s.rocks_memory_mb), "PYSPARK_PYTHON": sys.executable})
    return env


def timed_run(s: Settings, label: str, new_commands: int, tag: str) -> tuple[float, float, int]:
    """Produce ``new_commands`` creates, run the job once; return (s to first outcome, s to exit, peak RSS)."""
    before = events_written(s)
    produce(s, [(f"{tag}-{i}".encode(), codec.encode_command(
        CreateObject(f"{tag}-c{i}", f"{tag}-{i}", "alice", T0, document="{}"))) for i in range(new_commands)])
    start = time.perf_counter()
    job = subprocess.Popen([sys.executable, "-m", "app.validator", "--available-now"], env=env_of(s),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    first, peak = None, 0
    try:
        while job.poll() is None:
            peak = max(peak, tree_rss(job.pid))
            if first is None and events_written(s) > before:
                first = time.perf_counter() - start
            time.sleep(0.1)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    total = time.perf_counter() - start
    if job.returncode != 0:
        raise SystemExit(f"{label}: the job exited with {job.returncode}")
    if first is None:
        first = total
    print(f"{label}: first outcome after {first:.1f} s, job done after {total:.1f} s, peak RSS {peak / 2**20:,.0f} MiB",
          flush=True)
    return first, total, peak


def bulk_load(s: Settings, objects: int) -> None:
    """Add ``objects`` live object states to the shards, then snapshot each shard to the checkpoint location."""
    uri = checkpoint_uri(s)
    rng = random.Random(5)
    values = [(0).to_bytes(8, "big") + codec.encode_state(  # the job's layout: 8-byte write time + state
        ObjectState(exists=True, deleted=False, version=rng.randrange(1, 50), owner=f"user-{rng.getrandbits(40):x}",
                    editors=tuple(f"ed-{rng.getrandbits(24):x}" for _ in range(rng.randrange(3))),
                    created_at=T0 + timedelta(seconds=rng.randrange(10**8)),
                    updated_at=T0 + timedelta(seconds=rng.randrange(10**8)), document_size=rng.randrange(10**6)))
        for _ in range(4096)]
    per = objects // s.partitions
    t = time.perf_counter()
    for p in range(s.partitions):
        path = shard_dir(s, uri, p)
        lock = FileLock(path.with_name(path.name + ".lock"))
        lock.acquire(10)
        try:
            store = ShardStore(uri, p)
            shard = open_shard(path, store, 0, s)
            try:
                for start in range(0, per, 200_000):
                    wb = rocksdict.WriteBatch(raw_mode=True)
                    for i in range(start, min(per, start + 200_000)):
                        wb.put(STATE + b"obj-%d-%016x" % (p, rng.getrandbits(64)), values[i & 4095])
                    shard.db.write(wb)
                shard.db.flush()
                shard.snapshot(shard.last_batch(), s.snapshots_kept)
            finally:
                shard.close()
        finally:
            lock.release()
    size = sum(f.stat().st_size for f in rocks_root(s, uri).rglob("*") if f.is_file())
    print(f"bulk-loaded {objects:,} objects into {s.partitions} shards and snapshotted them in "
          f"{time.perf_counter() - t:.0f} s; local state {size / 2**20:,.0f} MiB", flush=True)


def restore_only(s: Settings) -> None:
    """Time restoring every shard from the checkpoint location into an empty directory (no Spark)."""
    uri = checkpoint_uri(s)
    scratch = s.model_copy(update={"rocks_dir": s.path(s.var_dir) / "restore-probe"})
    times = []
    for p in range(s.partitions):
        store = ShardStore(uri, p)
        t = time.perf_counter()
        shard = open_shard(shard_dir(scratch, uri, p), store, max([*store.changelogs(), *store.snapshots()]), scratch)
        times.append(time.perf_counter() - t)
        shard.close()
    shutil.rmtree(rocks_root(scratch, uri))
    print(f"restore of {s.partitions} shards from the checkpoint location alone: total {sum(times):.2f} s, "
          f"slowest shard {max(times):.2f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.rocks_restart")
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--commands", type=int, default=1000, help="new commands the timed runs decide")
    ap.add_argument("--bootstrap", default=None, help="an existing broker; default: start one on free ports")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-restart-"))
    with bootstrap_for(args.bootstrap, work) as bootstrap:
        tag = uuid.uuid4().hex[:6]
        s = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=args.partitions,
                     topic_commands=f"rs-commands-{tag}", topic_events=f"rs-events-{tag}",
                     topic_rejections=f"rs-rejections-{tag}", spark_master="local[2]")
        ensure_topics(s)
        timed_run(s, "seed run (empty state, includes first-run setup)", args.commands, "seed")
        bulk_load(s, args.objects)
        clean = timed_run(s, f"restart after a clean stop, {args.objects:,} objects", args.commands, "r1")
        restore_only(s)
        shutil.rmtree(rocks_root(s, checkpoint_uri(s)))
        lost = timed_run(s, f"restart after deleting local state, {args.objects:,} objects", args.commands, "r2")
        print(f"RESULT objects={args.objects} clean_first_s={clean[0]:.1f} lost_first_s={lost[0]:.1f} "
              f"peak_rss_mib={max(clean[2], lost[2]) / 2**20:.0f}")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
