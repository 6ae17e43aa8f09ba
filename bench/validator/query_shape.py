"""``python -m bench.validator.query_shape``: what each part of a Spark micro-batch costs, with no validator work.

Runs the same Kafka → Kafka copy of preloaded commands (``--per-trigger`` offsets per batch) in several query
shapes, one after another in one SparkSession, and prints each shape's ``triggerExecution`` p50/max and its
``addBatch`` and offset/commit-log parts. Shapes:

- ``direct``: Kafka source → Kafka sink, no Python (Spark's floor);
- ``arrow``: the same with an identity ``mapInArrow`` step (the Python task round trip);
- ``arrow-coalesced``: the same after ``coalesce(cores)`` (whole partitions per task, as the rocksdb backend runs);
- ``fb-arrow``: ``foreachBatch`` running the identity ``mapInArrow`` and a batch write (the first rocksdb shape);
- ``arrow-async``: ``arrow`` with ``asyncProgressTrackingEnabled`` (offset/commit logs off the batch path);
- ``arrow-coalesced-async``: ``arrow-coalesced`` with it too.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.settings import Settings
from app.spark_session import spark_session
from app.topics import ensure_topics
from app.validator.sink import sink_options
from app.validator.source import kafka_source
from app.validator.topic_io import produce
from bench.harness import throwaway_broker
from bench.validator.workload import records

# The floors copy commands as they are, without headers: the validator's sink schema less its ``headers`` column.
PASS_THROUGH_DDL = "topic STRING, key BINARY, value BINARY, partition INT"


def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


class Produce:
    """A ``mapInArrow`` step that writes its rows to Kafka itself (librdkafka, flushed before the task ends), yields none."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                      "queue.buffering.max.messages": 1_000_000})
        for b in batches:
            topics, keys, values, parts = (b.column(i).to_pylist() for i in range(4))
            for t, k, v, n in zip(topics, keys, values, parts, strict=True):
                while True:
                    try:
                        p.produce(t, v, k, partition=n)
                        break
                    except BufferError:
                        p.poll(0.05)
        p.flush()
        return iter(())


def writer(spark: Any, s: Settings, shape: str) -> Any:  # noqa: ANN401
    """Return the DataStreamWriter of ``shape`` (see the module docstring)."""
    src = kafka_source(spark, s).selectExpr(f"'{s.topic_events}' AS topic", "key", "value", "partition")
    if shape == "fb-arrow":
        def each(df: Any, _batch_id: int) -> None:  # noqa: ANN401
            df.mapInArrow(identity, PASS_THROUGH_DDL).write.format("kafka").options(**sink_options(s)).save()
        return src.writeStream.foreachBatch(each)
    if shape == "direct":
        out = src
    elif shape == "noop":  # Spark's Kafka source alone
        return src.writeStream.format("noop")
    elif shape == "arrow-coalesced-produce":  # the Python task writes to Kafka itself; Spark's sink is a no-op
        return src.coalesce(spark.sparkContext.defaultParallelism).mapInArrow(
            Produce(s.kafka_bootstrap), PASS_THROUGH_DDL).writeStream.format("noop")
    elif shape.startswith("arrow-coalesced"):
        out = src.coalesce(spark.sparkContext.defaultParallelism).mapInArrow(identity, PASS_THROUGH_DDL)
    else:
        out = src.mapInArrow(identity, PASS_THROUGH_DDL)
    w = out.writeStream.format("kafka").options(**sink_options(s))
    return w.option("asyncProgressTrackingEnabled", "true") if shape.endswith("-async") else w


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.query_shape")
    ap.add_argument("--shapes", default="direct,arrow,arrow-coalesced,fb-arrow,arrow-async,arrow-coalesced-async")
    ap.add_argument("--per-trigger", type=int, default=100)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--partitions", type=int, default=8)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    total = args.per_trigger * args.batches
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-shape-"))
    with throwaway_broker(work) as broker:
        tag = uuid.uuid4().hex[:6]
        s = Settings(kafka_bootstrap=broker.bootstrap, var_dir=work / "var", partitions=args.partitions,
                     topic_commands=f"shape-c-{tag}", topic_events=f"shape-out-{tag}", topic_rejections=f"shape-r-{tag}",
                     max_offsets_per_trigger=args.per_trigger)
        ensure_topics(s)
        produce(s, records(100_000, total))
        spark = spark_session(s, app_name="arbiter-bench-shape")
        print(f"{total} commands, {args.partitions} partitions, {args.per_trigger} offsets/trigger, "
              f"local[{spark.sparkContext.defaultParallelism}], trigger 0 s; first batch not counted", flush=True)
        try:
            for shape in args.shapes.split(","):
                q = writer(spark, s, shape).option("checkpointLocation", str(work / f"cp-{shape}")) \
                    .trigger(processingTime="0 seconds").start()
                while sum(p.numInputRows for p in q.recentProgress) < total:
                    time.sleep(0.2)
                q.stop()
                rows = [p for p in q.recentProgress if p.numInputRows][1:]
                te = [p.durationMs["triggerExecution"] for p in rows]
                ab = [p.durationMs.get("addBatch", 0) for p in rows]
                logs = [p.durationMs.get("walCommit", 0) + p.durationMs.get("commitOffsets", 0) for p in rows]
                print(f"{shape}: trigger p50 {statistics.median(te):.0f} ms, max {max(te)} ms; addBatch p50 "
                      f"{statistics.median(ab):.0f} ms; offset+commit logs p50 {statistics.median(logs):.0f} ms "
                      f"({len(rows)} batches)", flush=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
