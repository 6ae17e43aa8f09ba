"""Spark's Kafka source on the commands topic: key, value, the record's coordinates, its signature and trace context."""

from __future__ import annotations

import os

from app import limits
from app.rules.control import CONTROL_HEADER
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.traces import TRACEPARENT, TRACESTATE

# How many times over a micro-batch's records are held at once, at worst: the Python worker's Arrow table and the
# run it sends, the server's request frame, its decoded records, the outputs, their framing, the changelog, the
# stored chunks, the reply (app/validator/rocks/query.py, server.py, shard.py).
BATCH_COPIES = 10
MIN_OFFSETS_PER_TRIGGER = 100  # below this a batch's fixed cost (~0.1-1 s) would dominate a backlog's drain


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def offsets_per_trigger(settings: Settings) -> int:
    """Return the per-micro-batch cap: ``max_offsets_per_trigger``, else one derived from memory (docs/concepts/validator.md).

    ``max(100, batch_memory // (BATCH_COPIES * max_message_bytes))``, ``batch_memory`` being ``batch_memory_mb``
    or an eighth of physical memory: a batch of records of the largest size a topic takes, held ``BATCH_COPIES``
    times over, fits the budget. Without a cap the first batch after an outage takes the whole backlog.
    """
    if settings.max_offsets_per_trigger is not None:
        return settings.max_offsets_per_trigger
    budget = settings.batch_memory_mb * 1024 * 1024 if settings.batch_memory_mb else physical_memory_bytes() // 8
    floor = max(MIN_OFFSETS_PER_TRIGGER, settings.min_offsets_per_trigger or 0)  # Spark refuses min above max
    return max(floor, budget // (BATCH_COPIES * settings.max_message_bytes))


def source_options(settings: Settings, *, available_now: bool = False) -> dict[str, str]:
    """Return the Kafka source options: subscription, starting offsets, per-trigger cap, pass-through kafka.* options.

    ``minPartitions`` is never set: each topic partition is then read by one task in offset order.
    """
    opts = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        "subscribe": settings.topic_commands,
        "startingOffsets": settings.starting_offsets,
        "failOnDataLoss": "true",
        "includeHeaders": "true",  # for the headers read here: signature, traceparent, tracestate (header_columns)
        # The executors' cached consumers pre-fetch past each batch's range; with the default 500 ms that fetch
        # waits at the broker and every next task waits for it: ~2 s per live micro-batch of 8 partitions on
        # 2 cores (docs/benchmarks.md, "Latency"). 10 ms bounds that wait; it costs nothing between batches.
        "kafka.fetch.max.wait.ms": "10",
        # One partition fetch holds a whole batch of the topic's max.message.bytes (app/limits.py).
        **limits.source_options(settings),
    }
    opts["maxOffsetsPerTrigger"] = str(offsets_per_trigger(settings))
    if settings.min_offsets_per_trigger is not None and not available_now:
        # Light traffic: a trigger with fewer new commands than this is skipped until max_trigger_delay has passed
        # since the last batch, so a trickle does not pay Spark's per-batch cost every trigger interval.
        opts["minOffsetsPerTrigger"] = str(settings.min_offsets_per_trigger)
        opts["maxTriggerDelay"] = f"{settings.max_trigger_delay_ms}ms"
    for k, v in settings.kafka_config.items():
        if k.startswith("security.") or k.startswith("sasl.") or k.startswith("ssl."):
            opts[f"kafka.{k}"] = v
    return opts


#: The source's header columns: (column, Kafka header). Each holds the record's first header of that name, null when
#: it has none; the headers themselves go no further than these columns.
HEADER_COLUMNS = (("signature", SIGNATURE_HEADER), ("traceparent", TRACEPARENT), ("tracestate", TRACESTATE),
                  ("control", CONTROL_HEADER))
#: The columns both backends' queries select from the source, in order (``app.validator.fold.InputRecord``'s fields).
INPUT_COLUMNS = ("key", "value", "topic", "partition", "offset", *(c for c, _ in HEADER_COLUMNS))


def header_columns() -> list[str]:
    """Return the SQL of the header columns: ``signature`` (``app.signing``), ``traceparent`` and ``tracestate``
    (``app.traces``: copied onto the outputs) and ``control`` (``app.rules.control``: a rules control record).

    Each is the value of the first header of its name: ``array_position`` over the header keys (1-based, 0 when
    absent), then ``get`` (0-based, null out of range). Both are code-generated; ``filter(headers, h -> ...)``,
    used before, is a lambda Spark evaluates row by row outside the generated code (docs/benchmarks.md).
    """
    return [f"get(headers, CAST(array_position(headers.key, '{name}') AS INT) - 1).value AS {column}"
            for column, name in HEADER_COLUMNS]


def kafka_source(spark, settings: Settings, *, available_now: bool = False):  # noqa: ANN001, ANN201 - untyped pyspark
    """Return the streaming DataFrame of ``commands``: key, value, topic, partition, offset, timestamp and the header
    columns."""
    reader = spark.readStream.format("kafka")
    for k, v in source_options(settings, available_now=available_now).items():
        reader = reader.option(k, v)
    return reader.load().selectExpr("key", "value", "topic", "partition", "offset", "timestamp", *header_columns())
