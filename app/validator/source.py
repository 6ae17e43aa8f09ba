"""Spark's Kafka source on the commands topic, keeping key, value and the record's coordinates."""

from __future__ import annotations

from app import limits
from app.settings import Settings


def source_options(settings: Settings, *, available_now: bool = False) -> dict[str, str]:
    """Return the Kafka source options: subscription, starting offsets, per-trigger cap, pass-through kafka.* options.

    ``minPartitions`` is never set: each topic partition is then read by one task in offset order.
    """
    opts = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        "subscribe": settings.topic_commands,
        "startingOffsets": settings.starting_offsets,
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        # The executors' cached consumers pre-fetch past each batch's range; with the default 500 ms that fetch
        # waits at the broker and every next task waits for it: ~2 s per live micro-batch of 8 partitions on
        # 2 cores (docs/benchmarks.md, "Latency"). 10 ms bounds that wait; it costs nothing between batches.
        "kafka.fetch.max.wait.ms": "10",
        # One partition fetch holds a whole batch of the topic's max.message.bytes (app/limits.py).
        **limits.source_options(settings),
    }
    if settings.max_offsets_per_trigger is not None:
        opts["maxOffsetsPerTrigger"] = str(settings.max_offsets_per_trigger)
    if settings.min_offsets_per_trigger is not None and not available_now:
        # Light traffic: a trigger with fewer new commands than this is skipped until max_trigger_delay has passed
        # since the last batch, so a trickle does not pay Spark's per-batch cost every trigger interval.
        opts["minOffsetsPerTrigger"] = str(settings.min_offsets_per_trigger)
        opts["maxTriggerDelay"] = f"{settings.max_trigger_delay_ms}ms"
    for k, v in settings.kafka_config.items():
        if k.startswith("security.") or k.startswith("sasl.") or k.startswith("ssl."):
            opts[f"kafka.{k}"] = v
    return opts


def kafka_source(spark, settings: Settings, *, available_now: bool = False):  # noqa: ANN001, ANN201 - untyped pyspark
    """Return the streaming DataFrame of ``commands``: key, value, topic, partition, offset, timestamp."""
    reader = spark.readStream.format("kafka")
    for k, v in source_options(settings, available_now=available_now).items():
        reader = reader.option(k, v)
    return reader.load().select("key", "value", "topic", "partition", "offset", "timestamp")
