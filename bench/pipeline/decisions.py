"""Watch the events and rejections topics and note when each command's decision arrived, and what it was.

The benchmark's clients send their command ids as Idempotency-Keys, so a decision joins its request by id; with
time.monotonic() (one clock for every process on the machine) its latency counts from the request's scheduled
send, as the HTTP latency does. Decisions reach this consumer a fetch later than the API's own consumer sees them.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, TopicPartition

from app.settings import Settings
from commands import Event
from schemas import codec
from schemas.wire import DecodeError


class DecisionWatcher(threading.Thread):
    """From the topics' current ends: ``seen[command_id] = (arrival, outcome)``; outcome "accepted" or a reason."""

    def __init__(self, s: Settings) -> None:
        super().__init__(name="decision-watcher", daemon=True)
        self.seen: dict[str, tuple[float, str]] = {}
        self.undecodable = 0
        self._halt = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "bench-pipeline",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10, "log_level": 0})
        md = self.consumer.list_topics(timeout=10)
        tps = [TopicPartition(t, p) for t in (s.topic_events, s.topic_rejections) for p in md.topics[t].partitions]
        self.consumer.assign([TopicPartition(tp.topic, tp.partition, self.consumer.get_watermark_offsets(tp)[1])
                              for tp in tps])

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                for msg in self.consumer.consume(num_messages=1000, timeout=0.1):
                    now = time.monotonic()
                    if msg.error() is not None or msg.value() is None:
                        continue
                    try:
                        outcome = codec.decode_outcome(msg.value())
                    except DecodeError:
                        self.undecodable += 1
                        continue
                    if outcome.command_id is not None and outcome.command_id not in self.seen:
                        what = "accepted" if isinstance(outcome, Event) else str(outcome.reason)
                        self.seen[outcome.command_id] = (now, what)
        finally:
            self.consumer.close()

    def wait_for(self, keys: list[str], timeout: float) -> float:
        """Wait until every key has a decision or ``timeout`` passes; return the seconds waited."""
        start, pending = time.monotonic(), list(keys)
        while pending and time.monotonic() - start < timeout:
            time.sleep(0.1)
            pending = [k for k in pending if k not in self.seen]
        return time.monotonic() - start

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
