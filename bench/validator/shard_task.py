"""``python -m bench.validator.shard_task``: time one rocksdb shard task's Python path, without Spark or Kafka.

Pre-generates one partition's records (creates, updates, resent duplicates, stale-version updates and a few
misrouted records, keys routed with murmur2) as the Arrow batches ``mapInArrow`` hands a task, then runs the
task's Python (``shard_step``: Arrow rows → the shard server over its Unix socket → Arrow rows) over
consecutive batches into a temporary rocks dir and checkpoint. The shard servers run as threads of the
benchmark's own process, so its process time covers both sides of the socket. Prints µs/command and
commands/s per core for the batches after the first (state already in the shard), beside a same-run baseline
that only decodes the same values. ``--digest`` prints a hash of all outputs, to check that a change keeps
every byte; ``--against TREE`` runs another checkout (its own sources and compiled domain) in processes
alternating with this tree's, and fails if the outputs differ. Profile with py-spy on the running process."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.native import loader as native  # first: it decides whether `commands` and `schemas` load compiled
from app.settings import Settings
from app.validator.fold import InputRecord
from app.validator.murmur2 import partition_for
from app.validator.rocks.client import lanes, socket_path
from app.validator.rocks.query import shard_step
from app.validator.rocks.server import ShardServer
from bench.validator.workload import commands
from commands import UpdateObject
from schemas import codec

TOPIC = "commands"
NOW_MS = 1_750_000_000_000


def partition_records(objects: int, count: int, partitions: int, partition: int, seed: int,
                      object_type: str | None = None) -> list[InputRecord]:
    """Return ``count`` records of ``partition``: the workload's commands on its keys plus a realistic rest.

    About 2 % are resent commands (DUPLICATE), 2 % updates naming a stale version (VERSION_CONFLICT) and
    0.5 % records whose key belongs to another partition (MISROUTED).
    """
    rng = random.Random(seed)
    cmds = []
    foreign = []
    for c in commands(objects * partitions, count * partitions * 2, seed, object_type):
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
    """Return ``records`` as the Arrow batch Spark's ``mapInArrow`` hands the shard step.

    Each record carries the signature the API would give it (``app.signing``, with the default settings' key the
    shard's checker also derives), so the shard checks and decides every command as in production. A tree from
    before signed records has no ``app.signing`` and reads no ``signature`` column.
    """
    try:
        from app.signing import signer_for
    except ImportError:
        signatures: list[bytes | None] = [None] * len(records)
    else:
        signer = signer_for(Settings())
        signatures = [signer.sign(r.key, r.value) if r.value is not None else None for r in records]
    return pa.RecordBatch.from_arrays(
        [pa.array([r.key for r in records], pa.binary()), pa.array([r.value for r in records], pa.binary()),
         pa.array([r.topic for r in records], pa.string()), pa.array([r.partition for r in records], pa.int32()),
         pa.array([r.offset for r in records], pa.int64()), pa.array(signatures, pa.binary())],
        names=["key", "value", "topic", "partition", "offset", "signature"])


def baseline(records: list[InputRecord]) -> float:
    """Return process seconds to iterate ``records`` and decode each value (the floor any shard task pays)."""
    start = time.process_time()
    for r in records:
        codec.decode_command(r.value)
    return time.process_time() - start


@contextlib.contextmanager
def servers_here(settings: Settings, ckpt: str) -> Iterator[None]:
    """Run the checkpoint's shard servers as threads of this process, so its process time counts both sides.

    The task side finds them on their sockets as it would find spawned ones; the socket round trip, the
    Arrow on both sides and the server's decide loop are all timed, as in a validator (minus Spark).
    """
    servers = [ShardServer(socket_path(settings, ckpt, lane), idle_s=3600.0) for lane in range(lanes(settings))]
    threads = [threading.Thread(target=s.serve, name="bench-shard-server", daemon=True) for s in servers]
    for t in threads:
        t.start()
    for s in servers:
        while not s.path.exists():
            time.sleep(0.01)
    try:
        yield
    finally:
        for s in servers:
            s.close()
        for t in threads:
            t.join()


def run(arrow: list[pa.RecordBatch], partitions: int, digest: hashlib._Hash | None) -> list[float]:
    """Run every batch through ``shard_step`` in a fresh rocks dir, shard servers in this process; return each
    batch's process seconds (both sides of the socket)."""
    with tempfile.TemporaryDirectory(prefix="arbiter-shard-bench-") as tmp:
        settings = Settings(partitions=partitions, var_dir=Path(tmp) / "var", snapshot_every=10_000)
        ckpt = str(Path(tmp) / "ckpt")
        times: list[float] = []
        with servers_here(settings, ckpt):
            for b, batch in enumerate(arrow):
                start = time.process_time()
                out = list(shard_step(settings, ckpt, b, NOW_MS + b * 1000, iter([batch])))
                times.append(time.process_time() - start)
                if digest is not None:
                    for row in pa.Table.from_batches(out).to_pylist():
                        digest.update(b"%s|%s|%s|%d;" % (row["topic"].encode(), row["key"] or b"-", row["value"],
                                                         row["partition"]))
    return times


def peer_records(path: Path, count: int, partitions: int) -> list[InputRecord]:
    """Return the first ``count`` records of partition 0 of the peer benchmark's stream, as ``bench.peer`` sends it."""
    # By file path: with --against, another tree (without bench.peer) is on sys.path.
    spec = importlib.util.spec_from_file_location("_peer_convert", Path(__file__).resolve().parents[1] / "peer" / "convert.py")
    assert spec is not None and spec.loader is not None
    convert = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(convert)
    ours = (line for line in convert.peer_lines(path) if partition_for(line["object_id"].encode(), partitions) == 0)
    out: list[InputRecord] = []
    for _, cmd in convert.to_commands(ours):
        out.append(InputRecord(cmd.object_id.encode(), codec.encode_command(cmd), TOPIC, 0, len(out)))
        if len(out) >= count:
            break
    return out


def measure(a: argparse.Namespace) -> dict[str, object]:
    """Return this tree's figures: per run, each batch's process seconds; the outputs' digest; the baseline."""
    records = (peer_records(a.peer, a.batch * a.batches, a.partitions) if a.peer is not None
               else partition_records(a.objects, a.batch * a.batches, a.partitions, 0, a.seed))
    arrow = [to_arrow(records[i:i + a.batch]) for i in range(0, len(records), a.batch)]
    digest = hashlib.sha256()
    times = [run(arrow, a.partitions, digest if r == 0 else None) for r in range(a.repeat)]
    timed = records[a.batch:]
    base = min(baseline(timed) for _ in range(a.repeat)) / len(timed)
    return {"times": times, "digest": digest.hexdigest(), "baseline": base, "timed": len(timed),
            "domain": native.status()}


def report(name: str, fig: dict[str, Any], a: argparse.Namespace) -> None:
    times: list[list[float]] = fig["times"]
    n: int = fig["timed"]
    best = [min(t) for t in zip(*times, strict=True)]
    per = sum(best[1:]) / n
    runs_per = sorted(sum(t[1:]) / n * 1e6 for t in times)
    print(f"{name}: {per * 1e6:.1f} µs/command, {1 / per:,.0f} commands/s per core ({n:,} commands in "
          f"{a.batches - 1} batches of {a.batch:,}; process time of task and shard server, per batch the best of "
          f"{len(times)} runs; median run {runs_per[len(runs_per) // 2]:.1f} µs); empty-state batch "
          f"{best[0] * 1e6 / a.batch:.1f} µs/command (not counted); baseline (decode values only) "
          f"{fig['baseline'] * 1e6:.1f} µs; domain {fig['domain']}")


def _child(tree: Path, argv: list[str]) -> dict[str, Any]:
    """Run this benchmark's ``--json`` mode on ``tree``'s sources (its own compiled domain), in a new process."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--repeat", "1", "--json"],  # noqa: S603
                         cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=12_500, help="objects per partition")
    p.add_argument("--batch", type=int, default=12_500, help="records per batch (one shard task)")
    p.add_argument("--batches", type=int, default=4, help="batches; the first (empty state) is not timed")
    p.add_argument("--repeat", type=int, default=3, help="runs, each in a fresh rocks dir; per batch the fastest counts")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--digest", action="store_true", help="print a SHA-256 of the outputs")
    p.add_argument("--peer", type=Path, metavar="JSONL", help="partition 0 of the peer benchmark's commands.jsonl "
                   "(converted as bench.peer does) instead of the synthetic workload")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--against", type=Path, metavar="TREE",
                   help="also time another checkout (its own sources and compiled domain), one run per process, "
                        "alternating with this tree's; fails if the outputs differ")
    a = p.parse_args()
    if a.json:
        print(json.dumps(measure(a)))
        return
    if a.against is None:
        fig = measure(a)
        report("shard task", fig, a)
        if a.digest:
            print(f"outputs sha256: {fig['digest']}")
        return
    argv = [f"--{k}={getattr(a, k)}" for k in ("objects", "batch", "batches", "partitions", "seed")]
    argv += [f"--peer={a.peer.resolve()}"] if a.peer is not None else []
    here = Path(__file__).resolve().parents[2]
    trees = {"this tree": here, str(a.against): a.against.resolve()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for r in range(a.repeat):
        for name in list(trees)[::1 if r % 2 == 0 else -1]:  # alternate who goes first
            runs[name].append(_child(trees[name], argv))
    digests = {f["digest"] for figs in runs.values() for f in figs}
    for name, figs in runs.items():
        report(name, {**figs[0], "times": [t for f in figs for t in f["times"]],
                      "baseline": min(f["baseline"] for f in figs)}, a)
    if len(digests) > 1:
        raise SystemExit(f"outputs differ between the trees: {sorted(digests)}")
    print(f"outputs sha256: {digests.pop()} (identical in every run of both trees)")


if __name__ == "__main__":
    main()
