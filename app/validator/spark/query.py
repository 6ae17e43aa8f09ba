"""The reference backend's query: Kafka commands -> rules tags -> group by object id -> ``transformWithState`` -> sink."""

from __future__ import annotations

import logging
from typing import Any

from app.settings import Settings
from app.validator.backend import query_name
from app.validator.layout import check_layout
from app.validator.sink import SINK_COLUMNS, SINK_DDL, sink_options
from app.validator.source import INPUT_COLUMNS, kafka_source

log = logging.getLogger("arbiter.validator")

TAGGED_DDL = ("gkey binary, key binary, value binary, topic string, partition int, offset bigint, signature binary, "
              "traceparent binary, tracestate binary, control binary, rules bigint")
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def shuffle_partitions(settings: Settings) -> int:
    """Return the shuffle partitions of the stateful step: the setting, else the topic's partition count."""
    return settings.shuffle_partitions or settings.partitions


def streaming_conf(settings: Settings) -> dict[str, str]:
    """Return the session options the reference backend needs from its very first run."""
    return {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.stateStore.encodingFormat": "avro",
        # With processing-time mode, availableNow would otherwise run empty batches forever.
        "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions(settings)),
    }


# Logs a WARN for every get() of an absent value (each new object, twice): 100k lines per 50k commands.
STATE_SERVER_LOGGER = "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer"


def _quiet_state_server(spark: Any) -> None:  # noqa: ANN401
    """Raise the state server's log level to ERROR in this JVM (local mode: driver and executors).

    On a cluster, set it in the executors' log4j2 configuration (see docs/cluster.md).
    """
    jvm = spark._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(STATE_SERVER_LOGGER,
                                                                   jvm.org.apache.logging.log4j.Level.ERROR)


def start(spark: Any, settings: Settings, uri: str, *, available_now: bool) -> Any:  # noqa: ANN401
    """Check the checkpoint's layout, set the session's state-store options and start the query."""
    conf = streaming_conf(settings)
    check_layout(spark, uri, {"state_backend": "spark", "partitions": settings.partitions,
                              "shuffle_partitions": shuffle_partitions(settings),
                              "state_store_provider": ROCKSDB_PROVIDER})
    for k, v in conf.items():
        spark.conf.set(k, v)
    _quiet_state_server(spark)
    from app.validator.spark.processor import ValidatorProcessor
    from app.validator.spark.rules_stage import RulesTagger

    src = kafka_source(spark, settings, available_now=available_now).selectExpr(
        "coalesce(key, X'') AS gkey", *INPUT_COLUMNS)
    # Before the shuffle, one task per topic partition in offset order: the rules version of every row.
    tagged = src.mapInArrow(RulesTagger(settings, uri), TAGGED_DDL)
    outcomes = tagged.groupBy("gkey").transformWithState(
        statefulProcessor=ValidatorProcessor(settings, uri), outputStructType=SINK_DDL, outputMode="Append",
        timeMode="ProcessingTime")
    name = query_name(settings)
    writer = outcomes.select(*SINK_COLUMNS).writeStream.format("kafka").queryName(name) \
        .option("checkpointLocation", uri).outputMode("append")
    for k, v in sink_options(settings).items():
        writer = writer.option(k, v)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=settings.trigger_interval)
    query = writer.start()
    log.info("validator started: backend=spark query=%s checkpoint=%s", name, uri)
    return query
