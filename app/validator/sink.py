"""The one Kafka sink for events and rejections: routed by a ``topic`` column, explicit partition, idempotent producer."""

from __future__ import annotations

from app import limits
from app.settings import Settings

# The sink's columns, in order; ``topic`` routes each row, ``partition`` pins it (the source command's partition),
# ``headers`` are the outcome's CloudEvents attributes (``app.validator.headers``).
SINK_COLUMNS = ("topic", "key", "value", "partition", "headers")
SINK_DDL = "topic STRING, key BINARY, value BINARY, partition INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


def sink_options(settings: Settings) -> dict[str, str]:
    """Return the Kafka sink options shared by both state backends.

    The idempotent producer (acks=all, bounded in-flight requests) keeps a retried send from
    duplicating or reordering records within one attempt; a replayed micro-batch may write its
    records again, which is safe because outputs are deterministic (same bytes, same event ids).
    """
    opts = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        "kafka.enable.idempotence": "true",
        "kafka.acks": "all",
        "kafka.max.in.flight.requests.per.connection": "5",
        "kafka.retries": "2147483647",
        "kafka.delivery.timeout.ms": "120000",
        "kafka.linger.ms": "5",
        # max.request.size = the topics' max.message.bytes: every output record is sized to fit (app/limits.py).
        **limits.sink_options(settings),
    }
    for k, v in settings.kafka_config.items():
        if k.startswith("security.") or k.startswith("sasl.") or k.startswith("ssl."):
            opts[f"kafka.{k}"] = v
    return opts
