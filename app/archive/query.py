"""The archive query: commands, events, rejections (and parked records) from Kafka into Parquet, exactly once.

The commands of every generation (``arbiter rescale``: ``<commands>.g<k>``, ``schemas.generations``) are archived:
the query subscribes by a pattern, and Spark's Kafka source lists the topics again at every micro-batch and reads a
topic it has not seen from its earliest offset, so a generation created while the query runs (or while it was
stopped) is archived whole, each record under its own topic's name.

Spark's file sink writes each micro-batch's files, then records them in ``stream/_spark_metadata``; the Kafka
offsets of the batch are in the query's checkpoint. A batch that fails before its log entry is rewritten under new
names on restart and its first files are never listed, so whoever reads through the log (Spark itself, and
``projections.archived``) sees each record exactly once.
"""

from __future__ import annotations

import logging
from typing import Any

from app import limits
from app.archive.columns import DECODED, DECODED_DDL, Decoder
from app.settings import Settings
from projections.archived import CHECKPOINT, STREAM
from schemas.generations import generation_pattern

log = logging.getLogger("arbiter.archive")

QUERY_NAME = "arbiter-archive"
_RAW = ("topic", "partition", "offset", "unix_micros(timestamp) AS timestamp_us", "timestampType AS timestamp_type",
        "key", "value", "headers")
_RAW_DDL = ("topic STRING, partition INT, offset BIGINT, timestamp_us BIGINT, timestamp_type INT, key BINARY, "
            "value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
#: The archive's columns besides its partition columns (topic, date); ``time`` is the command's issued_at.
COLUMNS = ("partition", "offset", "timestamp", "timestamp_ms", "timestamp_type", "key", "value", "headers",
           *[c for c in DECODED if c != "time_us"], "time")


def kinds(settings: Settings) -> dict[str, str]:
    """Return the archived topics and what each holds (the commands topic: generation 0's; ``pattern`` matches them
    all)."""
    return {settings.topic_commands: "command", settings.topic_events: "event",
            settings.topic_rejections: "rejection", settings.parked_topic: "parked"}


def pattern(settings: Settings) -> str:
    """Return the pattern the query subscribes to: every generation's commands topic and the output topics."""
    others = (t.replace(".", r"\.") for t in (settings.topic_events, settings.topic_rejections, settings.parked_topic))
    return f"^({'|'.join((generation_pattern(settings.topic_commands), *others))})$"


def locations(settings: Settings) -> tuple[str, str]:
    """Return (the file sink's path, the query's checkpoint) under the archive root."""
    root = settings.archive_location.rstrip("/")
    return f"{root}/{STREAM}", f"{root}/{CHECKPOINT}"


def source_options(settings: Settings) -> dict[str, str]:
    opts = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        "subscribePattern": pattern(settings),
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",  # a record deleted before it was archived stops the query: the archive has no hole
        "includeHeaders": "true",
        **limits.source_options(settings),
    }
    # the parked topic's batches may be M + PARKED_MARGIN_BYTES
    opts["kafka.max.partition.fetch.bytes"] = str(settings.max_message_bytes + limits.PARKED_MARGIN_BYTES)
    for k, v in settings.kafka_config.items():
        if k.startswith(("security.", "sasl.", "ssl.")):
            opts[f"kafka.{k}"] = v
    return opts


def archive_frame(spark: Any, settings: Settings) -> Any:  # noqa: ANN401
    """Return the streaming DataFrame of archive rows: raw record columns, decoded columns, topic and date."""
    reader = spark.readStream.format("kafka")
    for k, v in source_options(settings).items():
        reader = reader.option(k, v)
    raw = reader.load().selectExpr(*_RAW)
    decoded = raw.mapInArrow(Decoder(kinds(settings), settings.topic_commands), f"{_RAW_DDL}, {DECODED_DDL}")
    return decoded.selectExpr(
        "topic", "date_format(timestamp_micros(timestamp_us), 'yyyy-MM-dd') AS date", "partition", "offset",
        "timestamp_micros(timestamp_us) AS timestamp", "timestamp_us DIV 1000 AS timestamp_ms", "timestamp_type",
        "key", "value", "headers", *[c for c in DECODED if c != "time_us"], "timestamp_micros(time_us) AS time")


def start(spark: Any, settings: Settings, *, available_now: bool = False) -> Any:  # noqa: ANN401
    """Start the archive query; with ``available_now`` it archives what the topics hold now and stops."""
    path, checkpoint = locations(settings)
    writer = archive_frame(spark, settings).writeStream.format("parquet").queryName(QUERY_NAME) \
        .option("path", path).option("checkpointLocation", checkpoint).partitionBy("topic", "date")
    writer = writer.trigger(availableNow=True) if available_now else \
        writer.trigger(processingTime=settings.archive_trigger_interval)
    log.info("archive: %s -> %s (checkpoint %s)", pattern(settings), path, checkpoint)
    return writer.start()
