"""Create and describe Arbiter's three topics: commands in, events and rejections out."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from app import limits
from app.errors import BrokerUnavailable, SetupError
from app.kafka_client import RECONNECT
from app.settings import Settings

log = logging.getLogger(__name__)

#: How long topic setup waits for new partitions to get a leader before it gives up (a KRaft controller elects them
#: a moment after it acknowledges the create; on a slow or busy machine that moment can take seconds).
LEADER_WAIT_S = 60.0
#: Errors that mean "not yet" right after a topic is created: its partitions have no leader, or the broker asked
#: does not know them yet. Retried until ``LEADER_WAIT_S``; anything else is raised at once.
NOT_YET = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                     KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION})


def topic_config(settings: Settings, name: str = "") -> dict[str, str]:
    """Topic settings a user would want; see docs/operations/running.md, "Topics" for why each is set."""
    return {
        "min.insync.replicas": str(settings.min_insync_replicas),
        "retention.ms": str(settings.retention_ms),
        "cleanup.policy": "delete",
        "message.timestamp.type": "CreateTime",
        "unclean.leader.election.enable": "false",
        **limits.topic_config(settings, name),  # max.message.bytes: the start of the size chain (app/limits.py)
    }


def replication_problem(settings: Settings, brokers: int) -> str | None:
    """Return why Arbiter's topics may not be created as ``settings`` ask on a cluster of ``brokers``, or None.

    On one broker nothing can be replicated (the embedded default). On several, a topic is created with
    ``replication_factor`` at least ``min_insync_replicas`` + 1: with fewer, losing one broker stops every
    ``acks=all`` write (RF = min.insync) or one broker holds every acknowledged record alone (min.insync = 1).
    """
    if brokers <= 1 or settings.replication_factor >= settings.min_insync_replicas + 1:
        return None
    return (f"refusing to create topics with ARBITER_REPLICATION_FACTOR={settings.replication_factor} and "
            f"ARBITER_MIN_INSYNC_REPLICAS={settings.min_insync_replicas} on a cluster of {brokers} brokers: a "
            "production topic needs a replication factor of at least min.insync.replicas + 1 (e.g. 3 and 2) so "
            "that an acknowledged command survives the loss of a broker and writes go on without it")


def _refuse_thin_replication(settings: Settings, brokers: int) -> None:
    problem = replication_problem(settings, brokers)
    if problem is not None:
        raise SetupError(problem)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **RECONNECT})


def ensure_topics(settings: Settings, names: list[str] | None = None, partitions: int | None = None,
                  config: Mapping[str, str] | None = None) -> list[str]:
    """Create the topics that do not exist yet; refuse a mismatched partition count. Returns the created ones.

    ``config`` overrides ``topic_config`` for the topics created here (e.g. the claims topic's retention).

    Existing topics get ``max.message.bytes`` = ``settings.max_message_bytes`` (see ``align_max_message_bytes``),
    and what would lose records is aligned or refused (``check_durability``).
    """
    if names is None and settings.output_partitions not in (None, settings.partitions):
        # A rescaled generation (app.rescale.generation): its commands topic has its own partition count, the
        # output topics keep theirs.
        outputs = ensure_topics(settings, default_topics(settings)[1:], settings.output_partitions)
        return ensure_topics(settings, [settings.topic_commands], settings.partitions) + outputs
    names = names or default_topics(settings)
    partitions = partitions or settings.partitions
    client = admin(settings.kafka_bootstrap)
    try:
        listed = client.list_topics(timeout=10)
    except KafkaException as e:
        raise BrokerUnavailable(f"cannot list topics at {settings.kafka_bootstrap}: {e}") from e
    existing = listed.topics
    for name in names:
        if name in existing and len(existing[name].partitions) != partitions:
            raise SetupError(
                f"topic {name!r} has {len(existing[name].partitions)} partitions but ARBITER_PARTITIONS={partitions}; "
                "object ids are hashed to partitions, so the count cannot change under live state"
            )
    present = [n for n in names if n in existing]
    align_max_message_bytes(client, settings, present)
    check_durability(client, settings, present, {n: existing[n] for n in present})
    new = [
        NewTopic(n, num_partitions=partitions, replication_factor=settings.replication_factor,
                 config={**topic_config(settings, n), **(config or {})})
        for n in names if n not in existing
    ]
    if new:
        _refuse_thin_replication(settings, len(listed.brokers))
    created, raced = [], []
    if new:
        for name, fut in client.create_topics(new, operation_timeout=30).items():
            try:
                fut.result()
                created.append(name)
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise BrokerUnavailable(f"creating topic {name!r} failed: {e}") from e
                raced.append(name)  # created meanwhile (or not yet in the metadata we listed): align it too
    align_max_message_bytes(client, settings, raced)
    if raced:
        check_durability(client, settings, raced, client.list_topics(timeout=10).topics)
    wait_for_leaders(client, created + raced)
    return [t.topic for t in new if t.topic in created]


def wait_for_leaders(client: AdminClient, names: list[str], timeout_s: float = LEADER_WAIT_S) -> None:
    """Return once every partition of ``names`` has a leader; raise ``BrokerUnavailable`` after ``timeout_s``.

    A create is acknowledged before its partitions have leaders: a produce, a fetch or a watermark query in that
    moment fails NOT_LEADER_FOR_PARTITION (the first ``docker compose up`` on an empty broker did, every time).
    """
    deadline = time.monotonic() + timeout_s
    waiting = list(names)
    while waiting:
        try:
            topics = client.list_topics(timeout=10).topics
        except KafkaException as e:
            raise BrokerUnavailable(f"cannot list topics at the broker: {e}") from e
        waiting = [n for n in waiting if not _led(topics.get(n))]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"partitions of {waiting} have no leader after {timeout_s:.0f} s")
        time.sleep(0.2)


def _led(meta: Any) -> bool:  # noqa: ANN401 - confluent_kafka's TopicMetadata is untyped
    """Return True if the topic is known and each of its partitions has a leader."""
    if meta is None or meta.error is not None or not meta.partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in meta.partitions.values())


def default_topics(settings: Settings) -> list[str]:
    """Return the topics ``ensure_topics`` creates: commands, events, rejections and the parking lot's two."""
    return [settings.topic_commands, settings.topic_events, settings.topic_rejections, settings.parked_topic,
            settings.parked_log_topic]


def ensure_lease_topic(settings: Settings) -> None:
    """Create the validator lease topic (one partition, never written: its owner in a group is the lease)."""
    ensure_topics(settings, [settings.topic_validator_leases], partitions=1)


def ensure_history_topic(settings: Settings, name: str, what: str) -> None:
    """Create ``name`` if missing: one partition, never deleted by retention (its records are a history: the rules
    catalog numbers the versions, the generations topic is every rescale), then wait for its leader.
    ``what`` names it in the ``BrokerUnavailable`` raised when the broker cannot create it."""
    client = admin(settings.kafka_bootstrap)
    try:
        listed = client.list_topics(timeout=10)
        if name in listed.topics:
            return
        _refuse_thin_replication(settings, len(listed.brokers))
        config = {**topic_config(settings), "retention.ms": "-1", "retention.bytes": "-1"}
        topic = NewTopic(name, num_partitions=1, replication_factor=settings.replication_factor, config=config)
        for fut in client.create_topics([topic], operation_timeout=30).values():
            try:
                fut.result()
            except KafkaException as e:
                if "TOPIC_ALREADY_EXISTS" not in str(e):
                    raise
        wait_for_leaders(client, [name])
    except KafkaException as e:
        raise BrokerUnavailable(f"cannot create the {what} {name!r}: {e}") from e


def align_max_message_bytes(client: AdminClient, settings: Settings, names: list[str]) -> None:
    """Set ``max.message.bytes`` of existing topics ``names`` to ``settings.max_message_bytes`` where it differs.

    A topic that takes less than the validator's sink may send would refuse an output record, failing the
    micro-batch on every restart: if it cannot be altered, that is a ``SetupError``. One that takes more is
    only logged when it cannot be altered (every record Arbiter writes still fits).
    """
    if not names:
        return
    for name, entries in describe_configs(client, names).items():
        want = str(limits.topic_max_message_bytes(settings, name))
        entry = entries.get("max.message.bytes")
        have = entry.value if entry is not None else None
        if have == want:
            continue
        change = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
            ConfigEntry("max.message.bytes", want, incremental_operation=AlterConfigOpType.SET)])
        try:
            for fut in client.incremental_alter_configs([change]).values():
                fut.result(timeout=30)
        except KafkaException as e:
            if have is None or int(have) < int(want):
                raise SetupError(f"topic {name!r} has max.message.bytes={have}, below ARBITER_MAX_MESSAGE_BYTES={want}, "
                                 f"and altering it failed: {e}") from e
            log.warning("topic %r keeps max.message.bytes=%s (ARBITER_MAX_MESSAGE_BYTES=%s): altering failed: %s",
                        name, have, want, e)
            continue
        log.warning("topic %r: max.message.bytes %s -> %s (ARBITER_MAX_MESSAGE_BYTES)", name, have, want)


def describe_configs(client: AdminClient, names: list[str]) -> dict[str, dict[str, ConfigEntry]]:
    """Return each topic's configuration entries (defaults included), by topic name."""
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    deadline = time.monotonic() + 15
    while True:
        try:
            return {r.name: f.result(timeout=30) for r, f in client.describe_configs(resources).items()}
        except KafkaException as e:
            # A topic created a moment ago may not be known to the broker answering yet.
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise BrokerUnavailable(f"cannot describe topics {names}: {e}") from e
            time.sleep(0.2)


class TopicUnsafe(SetupError):
    """An existing topic is configured in a way that can lose records, and Arbiter cannot safely change it."""

    code = "TOPIC_UNSAFE"


def check_durability(client: AdminClient, settings: Settings, names: list[str], metadata: dict[str, Any]) -> None:
    """Refuse or align existing topics whose settings would lose records (docs/operations/running.md, "Topics").

    Refused with ``TopicUnsafe``: a ``cleanup.policy`` other than ``delete`` (compaction keeps one record per key:
    every command but an object's last would go), and fewer replicas than ``ARBITER_REPLICATION_FACTOR`` (a
    reassignment is an operator's job). Raised to what the settings ask, as only keeping more can follow:
    ``retention.ms`` below ``ARBITER_RETENTION_MS`` (-1, forever, is kept), ``retention.bytes`` other than -1
    (a size bound deletes unread commands by volume), and ``min.insync.replicas`` below
    ``ARBITER_MIN_INSYNC_REPLICAS`` when the topic has the replicas for it (else refused).
    """
    if not names:
        return
    problems: list[str] = []
    for name, entries in describe_configs(client, names).items():
        def value(key: str, entries: dict[str, ConfigEntry] = entries) -> str | None:
            entry = entries.get(key)
            return None if entry is None else entry.value

        replicas = min((len(p.replicas) for p in metadata[name].partitions.values()), default=0)
        policy = value("cleanup.policy") or "delete"
        if policy != "delete":
            problems.append(f"topic {name!r} has cleanup.policy={policy}: compaction deletes every record of a key "
                            "but the newest, so commands and events would be lost; Arbiter needs cleanup.policy=delete "
                            "(recreate the topic, or alter it if you know its records may be compacted away)")
        if replicas < settings.replication_factor:
            problems.append(f"topic {name!r} has {replicas} replica(s) per partition, below "
                            f"ARBITER_REPLICATION_FACTOR={settings.replication_factor}: reassign its partitions "
                            "(kafka-reassign-partitions) or lower the setting knowingly")
        changes: dict[str, str] = {}
        retention = int(value("retention.ms") or -1)
        if retention != -1 and retention < settings.retention_ms:
            changes["retention.ms"] = str(settings.retention_ms)
        if int(value("retention.bytes") or -1) != -1:
            changes["retention.bytes"] = "-1"
        isr = int(value("min.insync.replicas") or 1)
        if isr < settings.min_insync_replicas:
            if replicas < settings.min_insync_replicas:
                problems.append(f"topic {name!r} has min.insync.replicas={isr}, below ARBITER_MIN_INSYNC_REPLICAS="
                                f"{settings.min_insync_replicas}, and only {replicas} replica(s) to raise it to")
            else:
                changes["min.insync.replicas"] = str(settings.min_insync_replicas)
        if changes:
            _alter(client, name, changes, {k: value(k) for k in changes}, problems)
    if problems:
        raise TopicUnsafe("; ".join(problems))


def _alter(client: AdminClient, name: str, changes: dict[str, str], had: dict[str, str | None],
           problems: list[str]) -> None:
    change = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()])
    try:
        for fut in client.incremental_alter_configs([change]).values():
            fut.result(timeout=30)
    except KafkaException as e:
        problems.append(f"topic {name!r} has {', '.join(f'{k}={had[k]}' for k in changes)}, which can lose records, "
                        f"and raising it to {', '.join(f'{k}={v}' for k, v in changes.items())} failed: {e}")
        return
    log.warning("topic %r: %s (so that no record is lost before it is read)", name,
                ", ".join(f"{k} {had[k]} -> {v}" for k, v in changes.items()))


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
                lo, hi = _watermarks(consumer, TopicPartition(name, p))
                total += hi - lo
            out.append(TopicStatus(name, len(meta.partitions), total))
        return out
    except KafkaException as e:
        raise BrokerUnavailable(f"cannot describe topics at {settings.kafka_bootstrap}: {e}") from e
    finally:
        consumer.close()


def _watermarks(consumer: Any, tp: Any, timeout_s: float = LEADER_WAIT_S) -> tuple[int, int]:  # noqa: ANN401
    """Return the low and high watermark of ``tp``, retrying the errors of a partition that has no leader yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            lo, hi = consumer.get_watermark_offsets(tp, timeout=10)
            return int(lo), int(hi)
        except KafkaException as e:
            if e.args[0].code() not in NOT_YET or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
