"""Waiting for the validator's decisions: one consumer of events and rejections per API process.

Each process assigns itself every partition of both topics from their ends at start (no consumer group
coordination, so any number of API processes each see every outcome) and keeps a bounded cache of recent
outcomes by command id. A waiter for (command_id, issued_at) is resolved by an event with that command
id (a retry of an accepted command is answered with its original outcome) or by a rejection of that very
attempt (same ``occurred_at``): an earlier attempt's rejection is not this attempt's answer.

Limitation: only outcomes written after this process started, and at most ``outcome_cache_size`` of
them, are known to ``lookup``; older ones answer 404 on ``GET /commands/{id}``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

from commands import Event, Rejection
from schemas import codec
from schemas.wire import DecodeError

log = logging.getLogger(__name__)

Outcome = Event | Rejection


def _matches(outcome: Outcome, issued_at: datetime) -> bool:
    return isinstance(outcome, Event) or outcome.occurred_at == issued_at


class OutcomeCache:
    """Recent outcomes by command id (an event, if any, wins) and the waiters on them; thread-safe."""

    def __init__(self, size: int, on_outcome: Callable[[Outcome], None] | None = None) -> None:
        self.size = size
        self._on_outcome = on_outcome
        self._lock = threading.Lock()
        self._known: OrderedDict[str, list[Outcome]] = OrderedDict()
        self._waiters: dict[str, list[tuple[datetime, asyncio.AbstractEventLoop, asyncio.Future[Outcome]]]] = {}

    def __len__(self) -> int:
        return len(self._known)

    def offer(self, outcome: Outcome) -> None:
        """Record an outcome (from any thread) and wake the waiters it answers."""
        cid = outcome.command_id
        if self._on_outcome is not None:
            self._on_outcome(outcome)
        if cid is None:  # a record that never became a command answers nobody
            return
        with self._lock:
            seen = self._known.pop(cid, None) or []
            seen.append(outcome)
            self._known[cid] = seen[-4:]
            while len(self._known) > self.size:
                self._known.popitem(last=False)
            waiters = self._waiters.get(cid)
            woken = []
            if waiters:
                woken = [w for w in waiters if _matches(outcome, w[0])]
                rest = [w for w in waiters if not _matches(outcome, w[0])]
                if rest:
                    self._waiters[cid] = rest
                else:
                    del self._waiters[cid]
        for _, loop, fut in woken:
            loop.call_soon_threadsafe(_resolve, fut, outcome)

    def lookup(self, command_id: str) -> Outcome | None:
        """Return the command's known outcome: its event if accepted, else its latest rejection."""
        with self._lock:
            seen = self._known.get(command_id)
            if not seen:
                return None
            return next((o for o in seen if isinstance(o, Event)), seen[-1])

    async def wait(self, command_id: str, issued_at: datetime, timeout: float) -> Outcome | None:
        """Return the outcome of the attempt issued at ``issued_at``, or None after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Outcome] = loop.create_future()
        entry = (issued_at, loop, fut)
        with self._lock:
            for o in self._known.get(command_id, ()):
                if _matches(o, issued_at):
                    return o
            self._waiters.setdefault(command_id, []).append(entry)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            with self._lock:
                waiters = self._waiters.get(command_id)
                if waiters and entry in waiters:
                    waiters.remove(entry)
                    if not waiters:
                        del self._waiters[command_id]


def _resolve(fut: asyncio.Future[Outcome], outcome: Outcome) -> None:
    if not fut.done():
        fut.set_result(outcome)


class OutcomeConsumer:
    """Reads events and rejections from their current ends into an ``OutcomeCache`` on a daemon thread."""

    def __init__(self, bootstrap: str, topics: list[str], partitions: int, cache: OutcomeCache,
                 kafka_config: dict[str, str] | None = None) -> None:
        self.cache = cache
        self.undecodable = 0
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"arbiter-api-{uuid.uuid4()}",  # never joined: partitions are assigned, not subscribed
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 50,
            "socket.nagle.disable": True,
            **(kafka_config or {}),
            "logger": log,
        })
        self._consumer.assign(self._ends(topics, partitions))
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="arbiter-api-outcomes", daemon=True)
        self._thread.start()

    def _ends(self, topics: list[str], partitions: int, timeout: float = 15.0) -> list[TopicPartition]:
        # Exact high watermarks, so an outcome written just after start is never skipped by a lazy "end".
        # Retried: right after topic creation the leaders may not be elected yet.
        deadline = time.monotonic() + timeout
        while True:
            try:
                md = self._consumer.list_topics(timeout=5)
                tps = [TopicPartition(t, p) for t in topics for p in md.topics[t].partitions]
                return [TopicPartition(tp.topic, tp.partition, self._consumer.get_watermark_offsets(tp, timeout=5)[1])
                        for tp in tps]
            except (KafkaException, KeyError) as e:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                log.warning("outcomes: no watermarks at start (%s); reading from the ends when reachable", e)
                return [TopicPartition(t, p, OFFSET_END) for t in topics for p in range(partitions)]

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _loop(self) -> None:
        while self._running:
            try:
                msgs = self._consumer.consume(500, 0.1)
            except KafkaException as e:  # pragma: no cover - librdkafka reports most trouble per message
                log.warning("outcomes: %s", e)
                continue
            for msg in msgs:
                if msg.error() is not None:
                    log.warning("outcomes: %s", msg.error())
                    continue
                try:
                    outcome = codec.decode_outcome(msg.value())
                except DecodeError as e:
                    self.undecodable += 1
                    log.warning("outcomes: undecodable record %s[%d]@%d: %s", msg.topic(), msg.partition(),
                                msg.offset(), e)
                    continue
                self.cache.offer(outcome)

    def close(self) -> None:
        """Stop the thread and close the consumer."""
        self._running = False
        self._thread.join(5)
        self._consumer.close()
