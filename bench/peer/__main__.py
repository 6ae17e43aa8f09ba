"""``python -m bench.peer``: Arbiter's rocksdb validator on the peer benchmark's command stream, beside the peers.

Converts the peer's ``commands.jsonl`` once (``bench.peer.convert``), produces it to a commands topic of its
own (8 partitions, keyed by object id as the peer's topic), and in the same sitting measures: a raw
confluent-kafka pass-through of those records, Spark's own Kafka → Kafka pass-through, and the rocksdb
validator draining them (``availableNow``). For each: commands/s over the whole drain and steady (batches after
the first), and CPU seconds by component (``bench.peer.cpu``: Spark JVM, Python workers, shard servers, the
bench process, the broker if it started one). Then it reads Arbiter's outcome topics and checks the counts per
reason against ``decide`` over the converted stream, and prints the peer's ``reference.py`` counts beside them
with the cross table of both rule sets. ``--contenders raw,kstreams,quix`` then runs the peer's own
``run_one.sh`` for each, one at a time (needs ``PEER_SCRATCH`` set up as the peer's README says), or with
``--print-only`` prints those commands. See docs/benchmarks.md, "Like for like".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from app.settings import Settings
from app.spark_session import spark_session
from app.topics import ensure_lease_topic, ensure_topics
from app.validator.topic_io import produce
from bench.harness import bootstrap_for
from bench.peer.convert import VALID, convert
from bench.peer.cpu import by_component, delta
from bench.validator.__main__ import passthrough, run_backend, spark_passthrough
from schemas import codec

PEER_DIR = Path(__file__).resolve().parents[3] / "shared" / "peer"  # /work/shared/peer beside the worktrees


def outcome_counts(settings: Settings, topics: tuple[str, str], total: int) -> dict[str, int]:
    """Return the count per reason (VALID for events) of the records on the events and rejections topics."""
    counts: Counter[str] = Counter()
    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"bench-peer-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "log_level": 0})
    events, rejections = topics
    parts = [TopicPartition(t, p, 0) for t in topics
             for p in c.list_topics(t, timeout=10).topics[t].partitions]
    c.assign(parts)
    idle = 0
    while sum(counts.values()) < total and idle < 10:
        batch = c.consume(num_messages=10_000, timeout=1)
        idle = 0 if batch else idle + 1
        for m in batch:
            if m.error() is not None:
                continue
            if m.topic() == events:
                counts[VALID] += 1
            else:
                counts[codec.decode_outcome(m.value()).reason.value] += 1  # type: ignore[union-attr]
    c.close()
    return dict(sorted(counts.items()))


def timed(label: str, count: int, fn: Any) -> dict[str, Any]:  # noqa: ANN401
    """Run ``fn``; return its result with the CPU seconds by component it cost and the per-1M figure."""
    before = by_component()
    start = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - start
    cpu = delta(before, by_component())
    out = result if isinstance(result, dict) else {"seconds": result}
    out.update({"label": label, "wall_s": round(wall, 2), "cpu_s": cpu, "cpu_s_per_1m": round(
        sum(v for k, v in cpu.items() if k != "broker") * 1e6 / count, 1), "rate": round(count / out["seconds"])})
    return out


def contender_commands(peer_dir: Path, names: list[str], run: str) -> list[list[str]]:
    """Return the peer's own command line for each contender (``run_one.sh MODE RUN_ID``)."""
    return [["bash", str(peer_dir / "run_one.sh"), name, f"{run}_{name.replace('-', '_')}"] for name in names]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__.splitlines()[0])
    ap.add_argument("--peer-dir", type=Path, default=PEER_DIR)
    ap.add_argument("--data", type=Path, default=None,
                    help="the peer's commands.jsonl (default: $PEER_SCRATCH/data/commands.jsonl)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N commands of the file")
    ap.add_argument("--bootstrap", default=None,
                    help="a running broker (e.g. the peer's 127.0.0.1:19092); default: start a throwaway one")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    ap.add_argument("--no-spark-passthrough", action="store_true")
    ap.add_argument("--contenders", default="", help="comma-separated peer contenders to run after Arbiter: "
                    "raw,kstreams,kstreams-eos,quix,dict,rocks (their run_one.sh, on the peer's broker)")
    ap.add_argument("--print-only", action="store_true", help="print the contenders' commands instead of running")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    scratch = os.environ.get("PEER_SCRATCH")
    data = args.data or (Path(scratch) / "data" / "commands.jsonl" if scratch else None)
    if data is None or not data.exists():
        raise SystemExit("no peer data: pass --data <commands.jsonl> or set PEER_SCRATCH (run the peer's gen.py)")

    t = time.process_time()
    conv = convert(data, args.peer_dir, args.limit)
    recs = conv["records"]
    n = len(recs)
    print(f"converted {n:,} peer commands from {data} in {time.process_time() - t:.1f} CPU s")
    print(f"expected (decide over the converted stream): {json.dumps(conv['expected'])}")
    print(f"peer reference.py rules over the same lines: {json.dumps(conv['peer'])}")
    print(f"peer -> Arbiter decisions: {json.dumps(conv['cross'])}")

    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-peer-"))
    results: dict[str, Any] = {"commands": n, "expected": conv["expected"], "peer_reference": conv["peer"],
                               "cross": conv["cross"], "runs": []}
    with bootstrap_for(args.bootstrap, work) as bootstrap:
        tag = uuid.uuid4().hex[:6]
        settings = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=8,
                            topic_commands=f"arbiter-peer-commands-{tag}", topic_events=f"arbiter-peer-raw-{tag}",
                            topic_rejections=f"arbiter-peer-unused-{tag}",
                            max_offsets_per_trigger=args.max_offsets_per_trigger)
        ensure_topics(settings)
        ensure_lease_topic(settings)  # before any driver joins its group (a fresh broker refuses the join else)
        t0 = time.perf_counter()
        produce(settings, recs)
        print(f"produced {n:,} commands to {settings.topic_commands} in {time.perf_counter() - t0:.1f} s")
        del recs, conv

        raw = timed("raw pass-through (confluent-kafka)", n, lambda: passthrough(settings, settings.topic_events, n))
        results["runs"].append(raw)
        print(f"{raw['label']}: {raw['rate']:,}/s, CPU s {raw['cpu_s']}")
        spark = spark_session(settings, app_name="arbiter-bench-peer")
        try:
            if not args.no_spark_passthrough:
                sp = timed("Spark Kafka -> Kafka pass-through", n, lambda: spark_passthrough(spark, settings, n))
                results["runs"].append(sp)
                print(f"{sp['label']}: {sp['rate']:,}/s whole, steady {sp['steady'] or 0:,.0f}/s, CPU s {sp['cpu_s']}")
            captured: dict[str, Settings] = {}

            def rocks() -> dict[str, Any]:
                r = run_backend(spark, settings, "rocksdb", n, keep=captured)
                return r

            ar = timed("Arbiter rocksdb", n, rocks)
            s = captured["settings"]
            ar["counts"] = outcome_counts(s, (s.topic_events, s.topic_rejections), n)
            ar["counts_match"] = ar["counts"] == results["expected"]
            results["runs"].append(ar)
            print(f"{ar['label']}: {ar['rate']:,}/s whole, steady {ar['steady'] or 0:,.0f}/s, {ar['batches']} "
                  f"batches, CPU s {ar['cpu_s']} = {ar['cpu_s_per_1m']} s per 1M commands (broker not counted)")
            print(f"Arbiter counts {json.dumps(ar['counts'])}: {'match' if ar['counts_match'] else 'DIFFER FROM'} "
                  "decide over the converted stream")
        finally:
            spark.stop()

    names = [x for x in args.contenders.split(",") if x]
    for cmd in contender_commands(args.peer_dir, names, f"arb{tag}"):
        print("peer contender:", " ".join(cmd))
        if not args.print_only:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
            print(done.stdout.rstrip())
            results["runs"].append({"label": f"peer {cmd[2]}", "output": done.stdout})
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    if not all(r.get("counts_match", True) for r in results["runs"]):
        raise SystemExit("Arbiter's counts per reason differ from decide over the converted stream")


if __name__ == "__main__":
    main()
