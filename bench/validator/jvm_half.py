"""``python -m bench.validator.jvm_half``: what Spark's JVM spends on each part of the validator's query, one at a time.

Produces the peer's commands (``bench.peer.convert``, signed as the API signs them) once, then drains them
(``availableNow``) with query shapes that add one part of the validator's plan at a time to Spark's Kafka → Kafka
pass-through, and the validator itself, in rounds, each shape on its own output topic and checkpoint. For each it
prints the CPU seconds per 1M commands of the Spark JVM and of the Python workers (``bench.peer.cpu``). Shapes:

- ``direct``: source → sink, key, value, partition (Spark's floor, ``bench.peer``'s "Spark pass-through");
- ``headers``: the same, evaluating the source's four header columns (``app.validator.source.header_columns``);
- ``headers-lambda``: the same with the header columns as a ``filter`` lambda each (main before this bench);
- ``arrow-in``: ``coalesce`` + ``mapInArrow`` over the validator's input columns, the Python step answering with
  key, value, partition and no headers;
- ``arrow-out``: the same, answering with seven CloudEvents-sized headers per row, as the validator's outputs;
- ``validator``: the rocksdb validator (``app.validator.job.build_query``).

A shape ending ``@compiled`` or ``@interpreted`` runs with that ``validator_codegen`` instead of ``--codegen``.

``--sink KEY=VALUE`` (repeatable) adds a Kafka sink option to every shape (e.g. ``kafka.batch.size=262144``).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.settings import Settings
from app.spark_session import spark_session
from app.topics import describe, ensure_lease_topic, ensure_topics
from app.validator.codegen import FACTORY_MODE, WHOLE_STAGE, codegen_conf
from app.validator.job import build_query
from app.validator.rocks import query as rocks_query
from app.validator.sink import SINK_DDL, sink_options
from app.validator.source import HEADER_COLUMNS, INPUT_COLUMNS, kafka_source, source_options
from app.validator.topic_io import produce
from bench.harness import bootstrap_for
from bench.peer.convert import convert
from bench.peer.cpu import by_component, delta

SHAPES = ("direct", "headers", "arrow-in", "arrow-out", "validator")
_HEADER_NAMES = ("ce_specversion", "ce_id", "ce_type", "ce_source", "ce_subject", "ce_time", "content-type")
_HEADER_SIZES = (3, 36, 21, 30, 12, 27, 16)  # an event's CloudEvents headers, as app.validator.headers writes them


class Answer:
    """The ``mapInArrow`` step of the arrow shapes: one output row per input row, with or without headers."""

    def __init__(self, topic: str, headers: bool) -> None:
        self.topic = topic
        self.headers = headers

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            n = len(b)
            if not n:
                continue
            headers: pa.Array = pa.nulls(n, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
            if self.headers:
                one = [{"key": k, "value": b"x" * size} for k, size in zip(_HEADER_NAMES, _HEADER_SIZES, strict=True)]
                headers = pa.array([one] * n, headers.type)
            yield pa.RecordBatch.from_arrays(
                [pa.array([self.topic] * n, pa.string()), b.column("key"), b.column("value"),
                 b.column("partition"), headers], names=["topic", "key", "value", "partition", "headers"])


def writer(spark: Any, s: Settings, shape: str, sink: dict[str, str]) -> Any:  # noqa: ANN401
    """Return the DataStreamWriter of ``shape`` (see the module docstring)."""
    src = kafka_source(spark, s, available_now=True)
    if shape == "direct":
        out = src.selectExpr(f"'{s.topic_events}' AS topic", "key", "value", "partition")
    elif shape.startswith("headers"):  # the header columns feed the value, so they are evaluated for every row
        if shape == "headers-lambda":  # the header columns as main wrote them before: a lambda per column
            reader = spark.readStream.format("kafka").options(**source_options(s, available_now=True))
            src = reader.load().selectExpr("key", "value", "partition", *(
                f"try_element_at(filter(headers, h -> h.key = '{name}'), 1).value AS {c}" for c, name in HEADER_COLUMNS))
        out = src.selectExpr(f"'{s.topic_events}' AS topic", "key", "partition",
                             "concat(value, coalesce(signature, X''), coalesce(traceparent, X''), "
                             "coalesce(tracestate, X''), coalesce(control, X'')) AS value")
    else:
        out = src.select(*INPUT_COLUMNS).coalesce(spark.sparkContext.defaultParallelism) \
            .mapInArrow(Answer(s.topic_events, shape == "arrow-out"), SINK_DDL)
    return out.writeStream.format("kafka").options(**{**sink_options(s), **sink})


def drain(spark: Any, s: Settings, shape: str, sink: dict[str, str], work: Path) -> float:  # noqa: ANN401
    """Drain the commands topic with ``shape`` (``@compiled``: with Spark's generated projections); wall seconds."""
    shape, _, mode = shape.partition("@")
    s = s.model_copy(update={"validator_codegen": mode or s.validator_codegen})
    spark.conf.set(FACTORY_MODE, "FALLBACK")  # Spark's defaults, then what validator_codegen asks for
    spark.conf.set(WHOLE_STAGE, "true")
    for key, value in codegen_conf(s).items():
        spark.conf.set(key, value)
    start = time.perf_counter()
    if shape == "validator":
        shipped = rocks_query.sink_options
        rocks_query.sink_options = lambda settings: {**shipped(settings), **sink}  # type: ignore[assignment]
        try:
            q = build_query(spark, s, available_now=True)
        finally:
            rocks_query.sink_options = shipped  # type: ignore[assignment]
    else:
        q = writer(spark, s, shape, sink).option("checkpointLocation", str(work / f"cp-{s.topic_events}")) \
            .trigger(availableNow=True).start()
    q.awaitTermination()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.jvm_half", description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="only the first N of the peer's commands")
    ap.add_argument("--data", type=Path, default=None, help="default: $PEER_SCRATCH/data/commands.jsonl")
    ap.add_argument("--peer-dir", type=Path, default=None, help="default: $PEER_SCRATCH/peer")
    ap.add_argument("--bootstrap", default=None, help="a running broker; default: start a throwaway one")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    ap.add_argument("--sink", action="append", default=[], help="KEY=VALUE: a Kafka sink option for every shape")
    ap.add_argument("--codegen", choices=("interpreted", "compiled"), default="interpreted",
                    help="the session's row projections for every shape (the validator's validator_codegen)")
    ap.add_argument("--warm", action="store_true", help="drain once with the validator first, not counted (JIT)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    scratch = Path(os.environ.get("PEER_SCRATCH", "/nonexistent"))
    conv = convert(args.data or scratch / "data" / "commands.jsonl", args.peer_dir or scratch / "peer", args.limit)
    recs = conv["records"]
    n = len(recs)
    sink = dict(kv.split("=", 1) for kv in args.sink)
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-jvm-half-"))
    with bootstrap_for(args.bootstrap, work) as bootstrap:
        tag = uuid.uuid4().hex[:6]
        base = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=8,
                        topic_commands=f"jvm-half-commands-{tag}", max_offsets_per_trigger=args.max_offsets_per_trigger,
                        validator_codegen=args.codegen)
        ensure_topics(base)
        ensure_lease_topic(base)
        produce(base, recs)
        del recs, conv
        print(f"{n:,} commands on {base.topic_commands}; sink options {sink or 'as shipped'}; "
              f"row projections {args.codegen}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        spark = spark_session(base, app_name="arbiter-bench-jvm-half")
        try:
            runs = [(r, shape) for r in range(-1 if args.warm else 0, args.rounds) for shape in args.shapes.split(",")]
            for r, shape in runs:
                if r < 0 and not shape.startswith("validator"):
                    continue
                t = f"{tag}-{shape.replace('@', '-')}-{r + 1}"
                s = base.model_copy(update={"topic_events": f"jvm-half-ev-{t}", "topic_rejections": f"jvm-half-rj-{t}",
                                            "checkpoint_location": str(work / f"cp-validator-{t}")})
                ensure_topics(s)
                before = by_component()
                seconds = drain(spark, s, shape, sink, work)
                cpu = delta(before, by_component())
                out = sum(x.messages for x in describe(s, [s.topic_events, s.topic_rejections]))
                if out != n:
                    raise SystemExit(f"{shape}: {out} records out for {n} commands")
                if r < 0:
                    continue
                per = {k: round(v * 1e6 / n, 1) for k, v in cpu.items() if k in ("spark_jvm", "python_workers",
                                                                                  "shard_servers")}
                print(f"round {r + 1} {shape:10s} {n / seconds:9,.0f}/s  CPU s per 1M {per}  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
