"""``python -m bench.validator --backend spark[,rocksdb] --objects 100000 --commands 50000``.

Preloads the commands once, then for each backend drains them (trigger availableNow) into that
backend's own output topics and checkpoint, and prints commands/s and batch latency beside two
baselines measured in the same run on the same records: a raw confluent-kafka consume + produce
pass-through, and Spark's own pass-through (the same Kafka source and sink options, same trigger
cap, no Python): the ceiling any Spark-based backend can reach on this machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from app.settings import Settings
from app.spark_session import spark_session
from app.topics import describe, ensure_lease_topic, ensure_topics
from app.validator.job import build_query
from app.validator.sink import sink_options
from app.validator.source import kafka_source
from app.validator.topic_io import produce
from bench.harness import bootstrap_for
from bench.validator.workload import records


def passthrough(settings: Settings, target: str, count: int) -> float:
    """Consume ``count`` records from commands and produce them to ``target`` (same key/value/partition); seconds."""
    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "log_level": 0, "fetch.min.bytes": 1})
    p = Producer({"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5})
    meta = c.list_topics(settings.topic_commands, timeout=10).topics[settings.topic_commands]
    start = time.perf_counter()
    c.assign([TopicPartition(settings.topic_commands, q, 0) for q in meta.partitions])
    done = 0
    while done < count:
        for m in c.consume(num_messages=10_000, timeout=5):
            if m.error() is None:
                p.produce(target, key=m.key(), value=m.value(), partition=m.partition())
                done += 1
        p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - start
    c.close()
    return elapsed


def steady(batches: list) -> float | None:  # noqa: ANN001 - pyspark progress objects
    """Return rows/s over every batch but the first (which also pays the Python workers' start); None if only one."""
    rest = batches[1:]
    seconds = sum(p.durationMs.get("triggerExecution", 0) for p in rest) / 1000
    return sum(p.numInputRows for p in rest) / seconds if rest and seconds > 0 else None


def _rate(value: float | None) -> str:
    return "n/a (one batch)" if value is None else f"{value:,.0f}/s"


def spark_passthrough(spark, settings: Settings, count: int) -> dict[str, float]:  # noqa: ANN001
    """Drain the commands topic into a copy topic with Spark's Kafka source and sink only; seconds and batches."""
    tag = uuid.uuid4().hex[:6]
    target = f"bench-spark-pass-{tag}"
    ensure_topics(settings, [target])
    start = time.perf_counter()
    query = kafka_source(spark, settings).selectExpr(f"'{target}' AS topic", "key", "value", "partition") \
        .writeStream.format("kafka").options(**sink_options(settings)) \
        .option("checkpointLocation", str(settings.path(settings.var_dir) / f"checkpoint-pass-{tag}")) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    out = sum(t.messages for t in describe(settings, [target]))
    if out != count:
        raise SystemExit(f"spark pass-through: {out} records for {count} commands")
    latencies = sorted(p.durationMs.get("triggerExecution", 0) / 1000 for p in batches)
    return {"seconds": elapsed, "batches": len(batches), "p50": statistics.median(latencies), "steady": steady(batches)}


def run_backend(spark, settings: Settings, backend: str, count: int,  # noqa: ANN001
                keep: dict[str, Settings] | None = None) -> dict[str, float]:
    """Drain the commands topic with ``backend``; return wall seconds and per-batch latencies.

    ``keep`` gets the run's settings (its own output topics and checkpoint) under "settings".
    """
    tag = uuid.uuid4().hex[:6]
    s = settings.model_copy(update={
        "state_backend": backend, "topic_events": f"bench-events-{backend}-{tag}",
        "topic_rejections": f"bench-rejections-{backend}-{tag}",
        "checkpoint_location": str(settings.path(settings.var_dir) / f"checkpoint-{backend}-{tag}")})
    ensure_topics(s)
    if keep is not None:
        keep["settings"] = s
    start = time.perf_counter()
    query = build_query(spark, s, available_now=True)
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    latencies = sorted(p.durationMs.get("triggerExecution", 0) / 1000 for p in batches)
    out = sum(t.messages for t in describe(s, [s.topic_events, s.topic_rejections]))
    if out != count:
        raise SystemExit(f"{backend}: {out} outcomes for {count} commands")
    return {"seconds": elapsed, "batches": len(batches), "p50": statistics.median(latencies),
            "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
            "rows_per_batch": count / max(1, len(batches)), "steady": steady(batches)}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator")
    ap.add_argument("--backend", default="spark", help="comma-separated: spark,rocksdb")
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--commands", type=int, default=50_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    ap.add_argument("--bootstrap", default=None, help="an existing broker; default: start one on free ports")
    ap.add_argument("--rules", metavar="FILE", help="a rules document: each backend then also runs the same workload, "
                    "its creates typed (--rules-type), on a commands topic whose partitions begin with that document's "
                    "control record; prints CPU s per 1M decisions without and with the rules")
    ap.add_argument("--rules-type", default="order", help="the type the workload's creates name with --rules")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-validator-"))
    with bootstrap_for(args.bootstrap, work) as bootstrap:
        tag = uuid.uuid4().hex[:6]
        settings = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=args.partitions,
                            topic_commands=f"bench-commands-{tag}", topic_events=f"bench-pass-{tag}",
                            topic_rejections=f"bench-unused-{tag}", max_offsets_per_trigger=args.max_offsets_per_trigger)
        ensure_topics(settings)
        ensure_lease_topic(settings)  # before any driver joins its group (a fresh broker refuses the join else)
        recs = records(args.objects, args.commands)
        distinct = len({k for k, _ in recs})
        t = time.perf_counter()
        produce(settings, recs)
        print(f"preloaded {len(recs)} commands on {distinct} distinct objects (of {args.objects}) "
              f"in {time.perf_counter() - t:.1f} s, {args.partitions} partitions")

        base = passthrough(settings, settings.topic_events, len(recs))
        base_rate = len(recs) / base
        print(f"raw pass-through (confluent-kafka consume+produce): {base:.2f} s, {base_rate:,.0f} commands/s")

        spark = spark_session(settings, app_name="arbiter-bench-validator")
        try:
            sp = spark_passthrough(spark, settings, len(recs))
            sp_rate = len(recs) / sp["seconds"]
            print(f"spark pass-through (Kafka source -> Kafka sink, no Python): {sp['seconds']:.1f} s, "
                  f"{sp_rate:,.0f} commands/s, {sp['batches']} batches, batch p50 {sp['p50']:.2f} s; "
                  f"steady (batches after the first) {_rate(sp['steady'])}")
            rates: dict[str, float] = {}
            steadies: dict[str, float | None] = {}
            for backend in args.backend.split(","):
                r = run_backend(spark, settings, backend, len(recs))
                rate = rates[backend] = len(recs) / r["seconds"]
                steadies[backend] = r["steady"]
                print(f"{backend}: {r['seconds']:.1f} s, {rate:,.0f} commands/s, {r['batches']} batches of "
                      f"~{r['rows_per_batch']:.0f}, batch latency p50 {r['p50']:.2f} s p99 {r['p99']:.2f} s, "
                      f"ratio to raw pass-through {rate / base_rate:.3f}, to spark pass-through {rate / sp_rate:.3f}; "
                      f"steady (batches after the first) {_rate(r['steady'])}")
            if args.rules:
                with_rules(spark, settings, args, Path(args.rules).read_text("utf-8"))
            if "rocksdb" in rates and "spark" in rates:
                print(f"rocksdb / transformWithState: {rates['rocksdb'] / rates['spark']:.1f}x", end="")
                a, b = steadies["rocksdb"], steadies["spark"]
                print(f"; steady {a / b:.1f}x, steady rocksdb / raw {a / base_rate:.3f}" if a and b else "")
        finally:
            spark.stop()


def with_rules(spark, settings: Settings, args: argparse.Namespace, document: str) -> None:  # noqa: ANN001
    """Run each backend over the untyped workload and over the typed one under ``document``; print CPU per decision.

    The typed workload goes to a commands topic of its own whose every partition begins with the rules' control
    record (``arbiter rules deploy``'s), so every command is decided under them. CPU is the Spark JVM's, the Python
    workers' and the shard servers' (``bench.peer.cpu``), not wall time: the machine may be shared.
    """
    from app.rules.deploy import deploy
    from bench.archive.__main__ import SPARK_PARTS
    from bench.peer.cpu import by_component, delta

    tag = uuid.uuid4().hex[:6]
    typed = settings.model_copy(update={"topic_commands": f"bench-commands-rules-{tag}"})
    ensure_topics(typed)
    deployed = deploy(typed, document, principal="bench")
    produce(typed, records(args.objects, args.commands, object_type=args.rules_type))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load}; rules version {deployed.deploy.version} ({deployed.deploy.digest[:12]}) on "
          f"{typed.topic_commands}; "
          f"creates typed {args.rules_type!r}")
    for backend in args.backend.split(","):
        per_m = {}
        for label, s in (("no rules", settings), ("rules", typed)):
            before = by_component()
            r = run_backend(spark, s, backend, args.commands)
            cpu = delta(before, by_component())
            per_m[label] = sum(cpu.get(k, 0.0) for k in SPARK_PARTS) / args.commands * 1e6
            parts = ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if v)
            print(f"{backend}, {label}: {args.commands / r['seconds']:,.0f} commands/s, {per_m[label]:,.1f} CPU s per "
                  f"1M decisions (Spark JVM + Python workers + shard servers; by component: {parts})")
        print(f"{backend}: rules / no rules CPU per decision {per_m['rules'] / per_m['no rules']:.2f}x "
              f"(goal: at most 1.25x)")


if __name__ == "__main__":
    main()
