"""Create and describe Arbiter's three topics: commands in, events and rejections out."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from app.errors import BrokerUnavailable, SetupError
from app.settings import Settings


def topic_config(settings: Settings) -> dict[str, str]:
    """Topic settings a user would want; see README "Topics" for why each is set."""
    return {
        "min.insync.replicas": str(settings.min_insync_replicas),
        "retention.ms": str(settings.retention_ms),
        "cleanup.policy": "delete",
        "message.timestamp.type": "CreateTime",
        "unclean.leader.election.enable": "false",
    }


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def ensure_topics(settings: Settings, names: list[str] | None = None, partitions: int | None = None) -> list[str]:
    """Create the topics that do not exist yet; refuse a mismatched partition count. Returns the created ones."""
    names = names or [settings.topic_commands, settings.topic_events, settings.topic_rejections]
    partitions = partitions or settings.partitions
    client = admin(settings.kafka_bootstrap)
    try:
        existing = client.list_topics(timeout=10).topics
    except KafkaException as e:
        raise BrokerUnavailable(f"cannot list topics at {settings.kafka_bootstrap}: {e}") from e
    for name in names:
        if name in existing and len(existing[name].partitions) != partitions:
            raise SetupError(
                f"topic {name!r} has {len(existing[name].partitions)} partitions but ARBITER_PARTITIONS={partitions}; "
                "object ids are hashed to partitions, so the count cannot change under live state"
            )
    new = [
        NewTopic(n, num_partitions=partitions, replication_factor=settings.replication_factor,
                 config=topic_config(settings))
        for n in names if n not in existing
    ]
    if new:
        for name, fut in client.create_topics(new, operation_timeout=30).items():
            try:
                fut.result()
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise BrokerUnavailable(f"creating topic {name!r} failed: {e}") from e
    return [t.topic for t in new]


@dataclass(frozen=True)
class TopicStatus:
    name: str
    partitions: int
    messages: int


def describe(settings: Settings, names: list[str] | None = None) -> list[TopicStatus]:
    """Partition counts and message counts (high minus low watermark) of the given topics."""
    from confluent_kafka import Consumer, TopicPartition

    names = names or [settings.topic_commands, settings.topic_events, settings.topic_rejections]
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "arbiter-status", "log_level": 0})
    try:
        md = consumer.list_topics(timeout=10)
        out = []
        for name in names:
            meta = md.topics.get(name)
            if meta is None or meta.error is not None:
                out.append(TopicStatus(name, 0, 0))
                continue
            total = 0
            for p in meta.partitions:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
                total += hi - lo
            out.append(TopicStatus(name, len(meta.partitions), total))
        return out
    except KafkaException as e:
        raise BrokerUnavailable(f"cannot describe topics at {settings.kafka_bootstrap}: {e}") from e
    finally:
        consumer.close()
