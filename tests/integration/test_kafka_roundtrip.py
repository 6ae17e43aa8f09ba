"""Records go broker -> Spark Kafka source -> Spark Kafka sink -> broker, unchanged and keyed."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer

from app.settings import Settings

pytestmark = pytest.mark.integration


def _produce(settings: Settings, topic: str, records: list[tuple[bytes, bytes]]) -> dict[bytes, tuple[int, int]]:
    placed: dict[bytes, tuple[int, int]] = {}

    def on_delivery(err, msg) -> None:  # noqa: ANN001
        assert err is None, err
        placed[msg.key()] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": settings.kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all"})
    for k, v in records:
        p.produce(topic, key=k, value=v, on_delivery=on_delivery)
    assert p.flush(30) == 0
    return placed


def _consume_all(settings: Settings, topic: str, n: int) -> list:  # noqa: ANN401
    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"t-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out = []
    try:
        for _ in range(120):
            for m in c.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m)
            if len(out) >= n:
                break
    finally:
        c.close()
    return out


def test_round_trip_through_spark(spark, settings: Settings) -> None:  # noqa: ANN001
    records = [(f"obj-{i}".encode(), f"value-{i}".encode() + bytes([0, 255, i % 256])) for i in range(200)]
    placed = _produce(settings, settings.topic_commands, records)
    assert len({p for p, _ in placed.values()}) == settings.partitions  # keys spread over every partition

    df = (spark.read.format("kafka")
          .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
          .option("subscribe", settings.topic_commands)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    rows = df.select("key", "value", "partition", "offset").collect()
    assert {(bytes(r.key), bytes(r.value)) for r in rows} == set(records)
    assert {bytes(r.key): (r.partition, r.offset) for r in rows} == placed  # Spark saw Kafka's own coordinates

    # Keep Kafka's partition on the way out, so the sink must write key -> same partition number.
    df.selectExpr("key", "value", "partition").write.format("kafka") \
        .option("kafka.bootstrap.servers", settings.kafka_bootstrap) \
        .option("topic", settings.topic_events).save()

    back = _consume_all(settings, settings.topic_events, len(records))
    assert len(back) == len(records)
    assert {(m.key(), m.value()) for m in back} == set(records)
    for m in back:
        assert m.partition() == placed[m.key()][0]
        assert m.offset() >= 0
