"""``python -m bench.validator.latency``: broker-to-broker latency of the running validator, per command.

For each backend (same commands, its own topics and checkpoint), starts the validator query with the
configured processing-time trigger (``--trigger``), warms it up, then sends bursts of B commands (``--bursts 100,1000``),
one burst at a time. Each command's latency is the time from its produce acknowledgement (it is on the
broker) to the moment a consumer of the events and rejections topics sees its outcome (matched by command
id). Also measures Spark's own floor in the same run: a query that only copies the commands topic to
another topic (Kafka source → Kafka sink, no Python), timed the same way per record.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from app.settings import Settings
from app.signing import signer_for
from app.spark_session import spark_session
from app.topics import ensure_topics
from app.validator.job import build_query
from app.validator.sink import sink_options
from app.validator.source import kafka_source
from app.validator.topic_io import producer
from bench.harness import throwaway_broker
from bench.validator.query_shape import PASS_THROUGH_DDL, identity
from bench.validator.workload import records
from schemas import codec


class Probe:
    """Send bursts of commands and time each one until its outcome is readable on the output topics."""

    def __init__(self, settings: Settings, outputs: list[str], match: str) -> None:
        self.settings = settings
        self.match = match  # "outcome": decode outcomes for their command id; "copy": the value is the command
        self.producer = producer(settings)
        self.consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"lat-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "log_level": 0, "fetch.wait.max.ms": 5})
        parts = [TopicPartition(t, p, 0) for t in outputs for p in range(settings.partitions)]
        self.consumer.assign(parts)

    def close(self) -> None:
        self.consumer.close()

    def burst(self, recs: list[tuple[bytes, bytes]], timeout: float = 120) -> list[float]:
        """Send ``recs``; return each command's seconds from produce acknowledgement to visible outcome."""
        acked: dict[str, float] = {}
        ids = [codec.decode_command(v).command_id for _, v in recs]
        pending = dict.fromkeys(ids)

        def on_delivery(err, msg) -> None:  # noqa: ANN001
            if err is None:
                acked[codec.decode_command(msg.value()).command_id] = time.perf_counter()

        signer = signer_for(self.settings)  # the validator rejects unsigned commands (app/signing.py)
        for key, value in recs:
            self.producer.produce(self.settings.topic_commands, key=key, value=value, on_delivery=on_delivery,
                                  headers=signer.headers(key, value))
        self.producer.flush(30)
        seen: dict[str, float] = {}
        deadline = time.perf_counter() + timeout
        while len(seen) < len(pending):
            if time.perf_counter() > deadline:
                raise SystemExit(f"{len(pending) - len(seen)} of {len(pending)} outcomes missing after {timeout} s")
            for m in self.consumer.consume(num_messages=10_000, timeout=0.05):
                now = time.perf_counter()
                if m.error() is not None or m.value() is None:
                    continue
                if self.match == "copy":
                    cid = codec.decode_command(m.value()).command_id
                else:
                    cid = codec.decode_outcome(m.value()).command_id
                if cid in pending and cid not in seen:
                    seen[cid] = now
        return [seen[c] - acked[c] for c in ids]


def _stats(lat: list[float]) -> str:
    lat = sorted(lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return (f"p50 {statistics.median(lat) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {lat[-1] * 1000:.0f} ms "
            f"({len(lat)} commands)")


def breakdown(query) -> str:  # noqa: ANN001 - a pyspark StreamingQuery
    """Return the median of each of Spark's ``durationMs`` parts over the query's recent batches that read rows."""
    parts: dict[str, list[int]] = {}
    for p in query.recentProgress:
        if p.get("numInputRows", 0) > 0:
            for k, v in p.get("durationMs", {}).items():
                parts.setdefault(k, []).append(v)
    return ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(parts.items(), key=lambda kv: -max(kv[1])))


def copy_query(spark, s: Settings, trigger: str, async_progress: bool, *, python: bool):  # noqa: ANN001, ANN201
    """Start a query copying the commands topic to the events topic: Spark's floor, with no state.

    ``python``: the rocksdb query's shape (``coalesce`` to the cores, an identity ``mapInArrow`` step);
    otherwise Kafka source straight to Kafka sink.
    """
    src = kafka_source(spark, s).selectExpr(f"'{s.topic_events}' AS topic", "key", "value", "partition")
    if python:
        src = src.coalesce(spark.sparkContext.defaultParallelism).mapInArrow(identity, PASS_THROUGH_DDL)
    return src.writeStream.format("kafka").options(**sink_options(s)) \
        .option("checkpointLocation", s.checkpoint_location).trigger(processingTime=trigger) \
        .option("asyncProgressTrackingEnabled", str(async_progress).lower()).start()


def measure(probe: Probe, recs: list[tuple[bytes, bytes]], bursts: list[int], rounds: int, warm: int) -> dict[int, list[float]]:
    """Warm up with ``warm`` commands, then ``rounds`` bursts of each size; return latencies per burst size."""
    pos = warm
    probe.burst(recs[:warm], timeout=300)  # the first batch starts the Python workers: not counted
    out: dict[int, list[float]] = {}
    for size in bursts:
        out[size] = []
        for _ in range(rounds):
            out[size] += probe.burst(recs[pos:pos + size])
            pos += size
            time.sleep(0.2)  # let the query go idle: each burst arrives at an idle validator
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.latency")
    ap.add_argument("--backend", default="rocksdb,spark", help="comma-separated: rocksdb,spark,floor "
                    "(floor: the rocksdb query's shape with an identity Python step); "
                    "the pass-through always runs first")
    ap.add_argument("--bursts", default="100,1000")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--trigger", default=Settings().trigger_interval, help="processing-time trigger (default: Settings')")
    ap.add_argument("--async-progress", action="store_true",
                    help="Spark's asyncProgressTrackingEnabled on the pass-through and floor queries (never on a validator: "
                    "its shards key idempotency by batch id, which async progress tracking may re-plan)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    bursts = [int(b) for b in args.bursts.split(",")]
    total = args.warm + args.rounds * sum(bursts)
    recs = records(args.objects, total)

    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-latency-"))
    with throwaway_broker(work) as broker:
        base = Settings(kafka_bootstrap=broker.bootstrap, var_dir=work / "var", partitions=args.partitions,
                        trigger_interval=args.trigger)
        spark = spark_session(base, app_name="arbiter-bench-latency")
        print(f"{total} commands on {args.objects} objects, {args.partitions} partitions, bursts {bursts} x "
              f"{args.rounds}, trigger {args.trigger}, async progress (pass-through, floor) {args.async_progress}, "
              f"Spark local[{spark.sparkContext.defaultParallelism}]", flush=True)
        try:
            for backend in ["passthrough", *filter(None, args.backend.split(","))]:
                tag = uuid.uuid4().hex[:6]
                s = base.model_copy(update={
                    "state_backend": backend if backend in ("rocksdb", "spark") else "rocksdb",
                    "topic_commands": f"lat-commands-{tag}", "topic_events": f"lat-events-{tag}",
                    "topic_rejections": f"lat-rejections-{tag}",
                    "checkpoint_location": str(work / f"checkpoint-{backend}-{tag}")})
                ensure_topics(s)
                if backend in ("floor", "passthrough"):
                    query = copy_query(spark, s, args.trigger, args.async_progress, python=backend == "floor")
                    probe = Probe(s, [s.topic_events], "copy")
                else:
                    query = build_query(spark, s)
                    probe = Probe(s, [s.topic_events, s.topic_rejections], "outcome")
                try:
                    lat = measure(probe, recs, bursts, args.rounds, args.warm)
                    parts = breakdown(query)
                finally:
                    probe.close()
                    query.stop()
                for size, values in lat.items():
                    print(f"{backend}: bursts of {size}: {_stats(values)}", flush=True)
                print(f"{backend}: Spark's durationMs per batch with rows, p50: {parts}", flush=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
