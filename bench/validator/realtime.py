"""``python -m bench.validator.realtime``: does Spark's Real-time Mode take Arbiter's Python step yet?

Spark 4.2's Real-time Mode (``trigger(realTime=...)``) runs long micro-batches whose rows flow through as they
arrive, with millisecond latency for plans it allows. Issue 26 found that it refuses Python UDFs
(``STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST`` for ``mapInArrow`` and the Arrow/batch Python
evaluators). This benchmark keeps asking, so the day Spark allows Python in Real-time Mode Arbiter knows. In one
run, on a throwaway broker, each query copies the commands topic to an output topic and is timed per record from
its produce acknowledgement to the moment a consumer sees it (``bench.validator.latency``'s probe):

- ``passthrough``: Kafka source → Kafka sink with the usual processing-time trigger (Spark's floor);
- ``passthrough-rt``: the same plan in Real-time Mode;
- ``floor-rt``: the rocksdb query's shape (an identity ``mapInArrow`` step) in Real-time Mode;
- ``rocksdb-rt``: the rocksdb validator's own shard step (``ShardTasks``) in Real-time Mode.

A query Spark refuses is reported with its error class, not timed; one it accepts is timed like the others.
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from app.settings import Settings, checkpoint_uri
from app.spark_session import spark_session
from app.topics import ensure_topics
from app.validator.rocks.query import ShardTasks
from app.validator.sink import SINK_DDL, sink_options
from app.validator.source import kafka_source, source_options
from bench.harness import throwaway_broker
from bench.validator.latency import Probe, _stats, measure
from bench.validator.query_shape import PASS_THROUGH_DDL, identity
from bench.validator.workload import records

VARIANTS = ("passthrough", "passthrough-rt", "floor-rt", "rocksdb-rt")


def start(spark: Any, s: Settings, variant: str, trigger: str, realtime: str) -> Any:  # noqa: ANN401
    """Start ``variant``'s query; raise whatever Spark raises when it refuses the plan."""
    if variant.endswith("-rt"):  # Real-time Mode refuses a per-trigger cap: the source without one
        opts = {k: v for k, v in source_options(s).items() if k != "maxOffsetsPerTrigger"}
        src = spark.readStream.format("kafka").options(**opts).load()
    else:
        src = kafka_source(spark, s)
    if variant == "rocksdb-rt":
        rows = src.select("key", "value", "topic", "partition", "offset").mapInArrow(
            ShardTasks(s.for_tasks(), checkpoint_uri(s)), SINK_DDL)
    else:
        rows = src.selectExpr(f"'{s.topic_events}' AS topic", "key", "value", "partition")
        if variant == "floor-rt":
            rows = rows.mapInArrow(identity, PASS_THROUGH_DDL)
    writer = rows.writeStream.format("kafka").options(**sink_options(s)).option("checkpointLocation",
                                                                                 s.checkpoint_location)
    if variant.endswith("-rt"):
        writer = writer.outputMode("update").trigger(realTime=realtime)
    else:
        writer = writer.trigger(processingTime=trigger)
    return writer.start()


def refusal(error: BaseException) -> str:
    """Return the error class Spark named (e.g. ``STREAMING_REAL_TIME_MODE.…``), else the message's first line."""
    text = str(error)
    named = re.search(r"\[([A-Z_]+(?:\.[A-Z_]+)*)\]", text)
    return named.group(1) if named else (text.strip().splitlines() or ["?"])[0][:200]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.realtime", description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--bursts", default="100")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warm", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--trigger", default=Settings().trigger_interval, help="the processing-time trigger")
    ap.add_argument("--realtime", default="30 seconds", help="Real-time Mode's batch duration")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    bursts = [int(b) for b in args.bursts.split(",")]
    recs = records(10_000, args.warm + args.rounds * sum(bursts))
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-realtime-"))
    with throwaway_broker(work) as broker:
        base = Settings(kafka_bootstrap=broker.bootstrap, var_dir=work / "var", partitions=args.partitions,
                        trigger_interval=args.trigger, state_backend="rocksdb")
        spark = spark_session(base, app_name="arbiter-bench-realtime")
        import pyspark

        print(f"pyspark {pyspark.__version__}, Spark local[{spark.sparkContext.defaultParallelism}], "
              f"processing-time trigger {args.trigger}, real-time batch {args.realtime}", flush=True)
        try:
            for variant in filter(None, args.variants.split(",")):
                tag = uuid.uuid4().hex[:6]
                s = base.model_copy(update={
                    "topic_commands": f"rt-commands-{tag}", "topic_events": f"rt-events-{tag}",
                    "topic_rejections": f"rt-rejections-{tag}",
                    "checkpoint_location": str(work / f"checkpoint-{variant}-{tag}")})
                ensure_topics(s)
                try:
                    query = start(spark, s, variant, args.trigger, args.realtime)
                except Exception as e:  # noqa: BLE001 - a refusal is this benchmark's finding
                    print(f"{variant}: refused at start: {refusal(e)}", flush=True)
                    continue
                time.sleep(10)  # a plan refused once it runs fails within its first batch's planning
                if not query.isActive or query.exception() is not None:
                    print(f"{variant}: started, then failed: {refusal(query.exception() or RuntimeError('stopped'))}",
                          flush=True)
                    continue
                probe = Probe(s, [s.topic_events, s.topic_rejections], "outcome" if variant == "rocksdb-rt" else "copy")
                try:
                    lat = measure(probe, recs, bursts, args.rounds, args.warm)
                except Exception as e:  # noqa: BLE001 - the query may fail once it runs
                    failure = query.exception() or e
                    print(f"{variant}: started, then failed: {refusal(failure)}", flush=True)
                    continue
                finally:
                    probe.close()
                    query.stop()
                for size, values in lat.items():
                    print(f"{variant}: bursts of {size}: {_stats(values)}", flush=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
