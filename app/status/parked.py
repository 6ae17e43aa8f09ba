"""The status page's parking-lot figures: the parked topic and its log, tailed from their beginning."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from app.parked.lot import Ledger
from app.settings import Settings

log = logging.getLogger(__name__)
RECENT = 10              # parked records listed on the page, the last read first
POLLS_PER_SNAPSHOT = 20  # at most this many non-blocking reads per call, so one call never stalls the page


class ParkedTail:
    """Keeps a ``Ledger`` (without the records' bytes) current with non-blocking reads of both topics."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ledger = Ledger(keep_bytes=False)
        self._consumer: Consumer | None = None

    def _assign(self) -> Consumer | None:
        s = self.settings
        c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "arbiter-status-parked",
                      "enable.auto.commit": False, "log_level": 0})
        md = c.list_topics(timeout=5)
        parts = [TopicPartition(t, p, OFFSET_BEGINNING) for t in (s.parked_topic, s.parked_log_topic)
                 if (meta := md.topics.get(t)) is not None and meta.error is None for p in sorted(meta.partitions)]
        if not parts:  # the topics do not exist (yet): try again next time
            c.close()
            return None
        c.assign(parts)
        return c

    def figures(self) -> dict[str, Any] | None:
        """Return counts and the newest parked records; None while the topics cannot be read (unknown, not zero)."""
        try:
            if self._consumer is None:
                self._consumer = self._assign()
            if self._consumer is None:
                return None
            for _ in range(POLLS_PER_SNAPSHOT):
                batch = self._consumer.consume(num_messages=5_000, timeout=0)
                if not batch:
                    break
                for m in batch:
                    if m.error() is not None:
                        continue
                    if m.topic() == self.settings.parked_topic:
                        self.ledger.add_parked(m.partition(), m.offset(), m.value())
                    else:
                        self.ledger.add_action(m.value())
        except KafkaException as e:
            log.warning("parking lot figures unavailable: %s", e)
            return None
        recent = [e.summary() for e in list(self.ledger.entries.values())[-RECENT:][::-1]]
        for r in recent:
            r.pop("actions")
        return {**self.ledger.counts(), "total": len(self.ledger.entries), "topic": self.settings.parked_topic,
                "recent": recent}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
