"""Spark's own latency floor in the same run: Kafka → an identity Python step → Kafka, driven open-loop (issue 26).

``Prefer: wait`` cannot answer sooner than Spark can carry a record from the commands topic through a Python
step to an output topic. This measures that floor on the stack's broker while the stack idles: a query of the
rocksdb validator's shape (Kafka source, ``coalesce`` to the cores, an identity ``mapInArrow``, Kafka sink, the
stack's trigger interval) in a Spark session of the benchmark's own, fed the clients' kind of records at a fixed
rate (record i produced at t0 + i/rate), each timed from its *scheduled* produce to the moment a consumer of the
output topic sees it — the same clock as the HTTP latencies, without HTTP, the API or the decision.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from app.api.writes.producer import producer_config
from app.load.openloop import percentile
from app.settings import Settings
from app.spark_session import spark_session
from app.topics import ensure_topics
from bench.pipeline.baseline import records
from bench.validator.latency import copy_query


@dataclass
class Floor:
    """Latency quantiles (seconds) of records carried by the floor query at ``rate``."""

    rate: float
    count: int
    seen: int
    latency: dict[str, float]


def measure_floor(base: Settings, work: Path, rates: list[float], duration: float, warmup: float = 10.0) -> list[Floor]:
    """Run the floor query on ``base``'s broker at each of ``rates`` for ``duration`` seconds; return the figures."""
    tag = uuid.uuid4().hex[:6]
    s = base.model_copy(update={"topic_commands": f"floor-in-{tag}", "topic_events": f"floor-out-{tag}",
                                "topic_rejections": f"floor-rej-{tag}",
                                "checkpoint_location": str(work / f"floor-checkpoint-{tag}"),
                                "var_dir": work / f"floor-var-{tag}"})
    ensure_topics(s)
    spark = spark_session(s, app_name="arbiter-bench-floor")
    query = copy_query(spark, s, s.trigger_interval, False, python=True)
    try:
        out: list[Floor] = []
        for n, rate in enumerate([min(rates), *rates]):
            figures = _drive(s, rate, warmup if n == 0 else duration, f"{tag}-{n}")
            if n:  # the first run warms the query (its first batch starts the Python workers): not reported
                out.append(figures)
        return out
    finally:
        query.stop()
        spark.stop()


def _drive(s: Settings, rate: float, duration: float, tag: str) -> Floor:
    data = records(int(rate * duration), tag, "bench-floor")
    due: dict[bytes, float] = {}
    seen: dict[bytes, float] = {}
    done = threading.Event()
    consumer = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": f"floor-{tag}", "log_level": 0,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5})
    ends = [TopicPartition(s.topic_events, p) for p in range(s.partitions)]
    consumer.assign([TopicPartition(t.topic, t.partition, consumer.get_watermark_offsets(t, timeout=10)[1])
                     for t in ends])
    # the value is the command: its bytes name the record (keys repeat: a create and its update share one)

    def watch() -> None:
        while not done.is_set() or len(seen) < len(due):
            for m in consumer.consume(num_messages=10_000, timeout=0.05):
                if m.error() is None and m.value() is not None:
                    seen.setdefault(m.value(), time.monotonic())
            if done.is_set() and time.monotonic() > deadline[0]:
                break

    deadline = [float("inf")]
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    producer = Producer(producer_config(s))
    t0 = time.monotonic() + 0.2
    for i, (key, value) in enumerate(data):
        at = t0 + i / rate
        now = time.monotonic()
        if at > now:
            time.sleep(at - now)
        due[value] = at
        producer.produce(s.topic_commands, value, key)
        producer.poll(0)
    producer.flush(30)
    deadline[0] = time.monotonic() + 60
    done.set()
    watcher.join(90)
    consumer.close()
    lat = [seen[v] - at for v, at in due.items() if v in seen]
    return Floor(rate, len(due), len(lat), {q: percentile(lat, f) for q, f in
                                             (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))})


def floor_line(f: Floor) -> str:
    """One line of the report."""
    ms: dict[str, Any] = {k: f"{v * 1000:,.0f}" for k, v in f.latency.items()}
    return (f"Spark floor (Kafka → identity mapInArrow → Kafka) at {f.rate:g}/s: {f.seen} of {f.count} seen; "
            f"scheduled produce → seen on the output topic p50 {ms['p50']} ms  p90 {ms['p90']} ms  "
            f"p99 {ms['p99']} ms  max {ms['max']} ms")
