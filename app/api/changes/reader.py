"""Reading a range of the events topic for one stream's catch-up: a consumer of its own, assigned, no group."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from commands import Event
from schemas import codec
from schemas.wire import DecodeError

log = logging.getLogger(__name__)


class Expired(Exception):
    """The range starts below a partition's first offset still kept: retention deleted events it needs."""

    def __init__(self, partition: int, wanted: int, first: int) -> None:
        super().__init__(f"partition {partition}: events from offset {wanted} are needed, the topic keeps them "
                         f"only from {first} (retention)")


class RangeReader:
    """Reads ``[start, end)`` of some partitions of ``topic`` in offset order per partition (blocking calls)."""

    def __init__(self, bootstrap: str, topic: str, kafka_config: Mapping[str, str] | None = None) -> None:
        self.topic = topic
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"arbiter-changes-catchup-{uuid.uuid4()}",
            "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 50,
            **(kafka_config or {}), "logger": log})
        self._lock = threading.Lock()  # ``close`` (the response's end) may come while a worker thread reads
        self._closed = False
        self._ends: dict[int, int] = {}
        self._next: dict[int, int] = {}

    def partitions(self) -> list[int]:
        return sorted(self._consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions)

    def watermarks(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """Return (first kept offset, next offset to be written) of each partition."""
        return {p: self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10) for p in partitions}

    def assign(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> None:
        """Read from ``starts`` up to (not including) ``ends``; raise Expired if a start is no longer kept."""
        wanted = {p: s for p, s in starts.items() if s < ends.get(p, 0)}
        for p, (first, _) in self.watermarks(list(wanted)).items():
            if wanted[p] < first:
                raise Expired(p, wanted[p], first)
        self._ends = {p: ends[p] for p in wanted}
        self._next = dict(wanted)
        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in wanted.items()])

    @property
    def done(self) -> bool:
        return all(self._next[p] >= e for p, e in self._ends.items())

    def read(self, max_records: int = 500, timeout: float = 0.2) -> list[tuple[int, int, Event | None]]:
        """Return the next records (partition, offset, event; None for an undecodable one) inside the range."""
        out: list[tuple[int, int, Event | None]] = []
        with self._lock:
            msgs = [] if self._closed else self._consumer.consume(max_records, timeout)
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                    p = msg.partition()
                    raise Expired(p, self._next.get(p, -1), self.watermarks([p])[p][0])
                if err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                continue
            p, o = msg.partition(), msg.offset()
            if o >= self._ends.get(p, 0):
                continue
            self._next[p] = o + 1
            try:
                event: Event | None = codec.decode_event(msg.value() or b"")
            except DecodeError as e:
                log.warning("changes: undecodable record %s[%d]@%d: %s", self.topic, p, o, e)
                event = None
            out.append((p, o, event))
        return out

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._consumer.close()
