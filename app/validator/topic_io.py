"""Plain confluent-kafka helpers around the validator's topics: preload commands, read a topic to its end."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Self

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from app.errors import BrokerUnavailable
from app.settings import Settings
from app.signing import signer_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record as read back: where it is, its bytes and its headers (in order)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


#: Told of each record a ``TopicFold`` skips, and why (the API counts them in a metric).
OnSkip = Callable[[Record, str], None]


class TopicFold:
    """The bookkeeping of a fold that reads a one-partition topic once, from where it stopped (``read_all``'s
    ``since``): the next offset to read and the records skipped, each logged and told to ``on_skip``."""

    what = "record"  # named in the log line of a skipped record

    def __init__(self, on_skip: OnSkip | None = None) -> None:
        self.next_offset = 0
        self.skipped = 0
        self.on_skip = on_skip

    def extend(self, records: Iterable[Record]) -> Self:
        """Fold ``records`` (the topic's, in offset order); return self."""
        for r in records:
            self.add(r)
        return self

    def add(self, record: Record) -> object:
        raise NotImplementedError

    def seen(self, record: Record) -> None:
        """Move the fold past ``record``."""
        self.next_offset = max(self.next_offset, record.offset + 1)

    def skip(self, record: Record, why: str) -> None:
        """Count, log and tell that ``record`` counts for nothing."""
        self.skipped += 1
        log.warning("ignoring %s %s[%d]@%d: %s", self.what, record.topic, record.partition, record.offset, why)
        if self.on_skip is not None:
            self.on_skip(record, why)


def producer(settings: Settings, **extra: str) -> Producer:
    """Return an idempotent producer that places keys as the Java client does (murmur2)."""
    conf = {"bootstrap.servers": settings.kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all",
            "enable.idempotence": True, "linger.ms": 5, **settings.kafka_config, **extra}
    return Producer(conf)


def produce(settings: Settings, records: Iterable[tuple[bytes | None, bytes | None]], topic: str | None = None,
            partition: int | None = None, *, sign: bool = True) -> list[tuple[int, int]]:
    """Produce ``(key, value)`` pairs in order to ``topic`` (default: commands); return their (partition, offset).

    Records for the commands topic are signed as the API signs them (``app.signing``) unless ``sign`` is False.
    """
    placed: list[tuple[int, int]] = []
    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))
        else:
            placed.append((msg.partition(), msg.offset()))

    p = producer(settings)
    target = topic or settings.topic_commands
    extra = {} if partition is None else {"partition": partition}
    signer = signer_for(settings) if sign and target == settings.topic_commands else None
    for key, value in records:
        headers = signer.headers(key, value) if signer is not None and value is not None else None
        while True:
            try:
                p.produce(target, key=key, value=value, on_delivery=on_delivery, headers=headers, **extra)
                break
            except BufferError:  # the local queue is full: let deliveries drain, then retry this record
                p.poll(0.1)
        p.poll(0)
    if p.flush(60) != 0 or errors:
        raise BrokerUnavailable(f"producing to {target} failed: {errors[:3] or 'flush timed out'}")
    return placed


def produce_with_headers(settings: Settings,
                         records: Iterable[tuple[bytes | None, bytes, list[tuple[str, bytes]], int | None]],
                         topic: str) -> list[tuple[int, int]]:
    """Produce ``(key, value, headers, partition)`` records in order to ``topic``; return their (partition, offset).

    The caller signs (``app.rules.control``); a ``partition`` of None lets the key place the record.
    """
    placed: list[tuple[int, int]] = []
    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))
        else:
            placed.append((msg.partition(), msg.offset()))

    p = producer(settings)
    for key, value, headers, partition in records:
        extra = {} if partition is None else {"partition": partition}
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery, **extra)
        p.poll(0)
    if p.flush(60) != 0 or errors:
        raise BrokerUnavailable(f"producing to {topic} failed: {errors[:3] or 'flush timed out'}")
    return placed


def read_all(settings: Settings, topic: str, timeout: float = 30, *, since: int = 0) -> list[Record]:
    """Read ``topic`` from its beginning (on a one-partition topic: from offset ``since``, a follower's next) to its
    current end (high watermarks); records by (partition, offset)."""
    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "arbiter-read-all",
                  "enable.auto.commit": False, "log_level": 0, "isolation.level": "read_uncommitted"})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in meta.partitions}
        if since and len(ends) == 1:
            ends = {p: (max(lo, since), hi) for p, (lo, hi) in ends.items()}
        todo = {p for p, (lo, hi) in ends.items() if hi > lo}
        c.assign([TopicPartition(topic, p, ends[p][0]) for p in todo])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"reading {topic}: partitions {sorted(todo)} not read to their end in {timeout} s")
            # consume() waits for num_messages or the timeout, whichever comes first: keep the wait short.
            for m in c.consume(num_messages=10_000, timeout=0.2):
                if m.error() is not None:
                    raise BrokerUnavailable(f"reading {topic}: {m.error()}")
                out.append(Record(topic, m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
                if m.offset() >= ends[m.partition()][1] - 1:
                    todo.discard(m.partition())
        return sorted(out, key=lambda r: (r.partition, r.offset))
    except KafkaException as e:
        raise BrokerUnavailable(f"reading {topic}: {e}") from e
    finally:
        c.close()
