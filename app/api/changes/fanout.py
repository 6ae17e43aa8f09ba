"""One consumer of the events topic per API process, feeding every live subscriber through a bounded queue.

The feed's thread reads every partition from the high watermarks it found when it started (no consumer group),
decodes each event once, learns the roles before and after it (``roles.RolesBook``) when anyone follows that
object, and hands each subscriber only what it may see: the event if it may read the object after it, an
``access-revoked`` item if it could before and cannot after. A subscriber whose queue is full is cut off (a final
``reset`` item; it resumes from its last id), never buffered without limit.

``attach`` returns the next offset the feed will hand on per partition, taken under the same lock the thread holds
while it moves past a record and lists who gets it: every record at or after that offset reaches the subscriber,
none before it, so a catch-up that reads up to it meets the live items without a gap or an overlap.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from app.api.changes.frames import event_data, revoked_data
from app.api.changes.roles import RolesBook, RolesSource, RolesUnknown
from app.api.problems import ApiError
from commands import Event
from schemas import codec
from schemas.wire import DecodeError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Item:
    """What a subscriber's queue holds: ``change`` / ``access-revoked`` at a position, or a final ``reset``."""

    kind: str
    partition: int
    offset: int
    data: bytes
    event: Event | None = None


@dataclass(eq=False)
class Subscriber:
    """One stream's place in the feed: who it is, what it follows (one object or all) and its bounded queue."""

    principal: str
    groups: tuple[str, ...]
    object_id: str | None
    max_queue: int
    loop: asyncio.AbstractEventLoop | None = None
    queue: deque[Item] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    cut: bool = False  # the feed stopped feeding it (overflow, roles unknown, shutdown); its last item says why

    def push(self, item: Item) -> None:
        """Queue ``item`` (from the feed's thread); on a full queue, cut the subscriber off instead."""
        if self.cut:
            return
        if len(self.queue) >= self.max_queue:
            self.cut = True
            item = Item("reset", item.partition, item.offset, b"SLOW_CONSUMER")
        self.queue.append(item)
        # Set from the loop's thread; the stream clears ``wake`` before it looks at the queue, so a skipped set
        # (already set) is never a lost wake-up.
        if self.loop is not None and not self.wake.is_set():
            self.loop.call_soon_threadsafe(self.wake.set)

    def stop(self, code: str) -> None:
        if not self.cut:
            self.push(Item("reset", -1, -1, code.encode()))
            self.cut = True


class ChangeFeed:
    """The process's live change feed: started by the first subscriber, then reading until ``close``."""

    def __init__(self, bootstrap: str, topic: str, roles: RolesSource, *, max_subscribers: int,
                 max_per_principal: int, max_queue: int, retry_after_s: int,
                 kafka_config: dict[str, str] | None = None, max_roles: int = 100_000) -> None:
        self.bootstrap, self.topic, self.kafka_config = bootstrap, topic, kafka_config or {}
        self.book = RolesBook(roles, topic, max_roles)
        self.max_subscribers, self.max_per_principal = max_subscribers, max_per_principal
        self.max_queue, self.retry_after_s = max_queue, retry_after_s
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._reserved = 0
        self._all: list[Subscriber] = []
        self._by_object: dict[str, list[Subscriber]] = {}
        self._positions: dict[int, int] = {}
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        self.delivered = 0
        self.undecodable = 0

    @property
    def subscribers(self) -> int:
        """Streams open now (each holds a slot from ``reserve`` to ``release``)."""
        return self._reserved

    # -- slots -------------------------------------------------------------------------------------------------

    def reserve(self, principal: str) -> None:
        """Take a subscriber slot for ``principal``: 503 TOO_MANY_SUBSCRIBERS when the process has none left,
        429 TOO_MANY_SUBSCRIPTIONS when ``principal`` holds its most."""
        with self._lock:
            if self._reserved >= self.max_subscribers:
                raise ApiError(f"this API process serves its most change streams ({self.max_subscribers}, "
                               "ARBITER_CHANGES_MAX_SUBSCRIBERS); retry later", code="TOO_MANY_SUBSCRIBERS",
                               headers={"Retry-After": str(self.retry_after_s)})
            held = self._held.get(principal, 0)
            if held >= self.max_per_principal:
                raise ApiError(f"the principal holds its most change streams on this API process "
                               f"({self.max_per_principal}, ARBITER_CHANGES_MAX_PER_PRINCIPAL); close one first",
                               code="TOO_MANY_SUBSCRIPTIONS", headers={"Retry-After": str(self.retry_after_s)})
            self._held[principal] = held + 1
            self._reserved += 1

    def release(self, principal: str) -> None:
        with self._lock:
            self._reserved -= 1
            held = self._held.pop(principal) - 1
            if held:
                self._held[principal] = held

    # -- live subscribers ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the feed's consumer and thread if they are not running (blocking: metadata and watermarks)."""
        with self._start_lock:
            if self._thread is not None:
                return
            consumer = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": f"arbiter-changes-{uuid.uuid4()}",
                "enable.auto.commit": False, "fetch.wait.max.ms": 50, "socket.nagle.disable": True,
                **self.kafka_config, "logger": log})
            md = consumer.list_topics(self.topic, timeout=10)
            partitions = sorted(md.topics[self.topic].partitions)
            ends = {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1] for p in partitions}
            consumer.assign([TopicPartition(self.topic, p, o) for p, o in ends.items()])
            with self._lock:
                self._positions = dict(ends)
            self._consumer, self._running = consumer, True
            self._thread = threading.Thread(target=self._run, name="arbiter-changes", daemon=True)
            self._thread.start()

    def positions(self) -> dict[int, int]:
        """The next offset the feed will hand on, per partition."""
        with self._lock:
            return dict(self._positions)

    def attach(self, sub: Subscriber) -> dict[int, int]:
        """Start feeding ``sub``; return the offset per partition from which it gets every record."""
        sub.loop = asyncio.get_running_loop()
        with self._lock:
            if sub.object_id is None:
                self._all.append(sub)
            else:
                self._by_object.setdefault(sub.object_id, []).append(sub)
            return dict(self._positions)

    def detach(self, sub: Subscriber) -> None:
        with self._lock:
            if sub.object_id is None:
                if sub in self._all:
                    self._all.remove(sub)
            else:
                subs = self._by_object.get(sub.object_id)
                if subs and sub in subs:
                    subs.remove(sub)
                    if not subs:
                        del self._by_object[sub.object_id]

    # -- the thread ------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        assert self._consumer is not None
        while self._running:
            try:
                msgs = self._consumer.consume(500, 0.1)
            except KafkaException as e:  # pragma: no cover - librdkafka reports most trouble per message
                log.warning("changes: %s", e)
                time.sleep(0.1)
                continue
            for msg in msgs:
                if msg.error() is not None:
                    log.warning("changes: %s", msg.error())
                    continue
                try:
                    self._handle(msg.partition(), msg.offset(), msg.value())
                except Exception:  # noqa: BLE001 - the thread must not die; its subscribers are cut off instead
                    log.exception("changes: handing on %s[%d]@%d failed", self.topic, msg.partition(), msg.offset())
                    for sub in self._everyone():
                        sub.stop("FEED_ERROR")

    def _everyone(self) -> list[Subscriber]:
        with self._lock:
            return [*self._all, *(s for subs in self._by_object.values() for s in subs)]

    def _handle(self, partition: int, offset: int, value: bytes | None) -> None:
        try:
            event = codec.decode_event(value or b"")
        except DecodeError as e:
            self.undecodable += 1
            log.warning("changes: undecodable record %s[%d]@%d: %s", self.topic, partition, offset, e)
            event = None
        with self._lock:
            # moving past the record and listing its receivers is one step: see ``attach``
            self._positions[partition] = offset + 1
            if event is None:
                return
            followers = self._by_object.get(event.object_id)
            subs = [*self._all, *followers] if followers else list(self._all)
        if not subs:
            self.book.follow(event)
            return
        try:
            before, after = self.book.observe(event, partition, offset)
        except RolesUnknown as e:
            log.warning("changes: %s; cutting off %d subscribers", e, len(subs))
            for sub in subs:
                sub.stop(e.code)
            return
        change: bytes | None = None
        for sub in subs:
            if after.may_read(sub.principal, sub.groups):
                if change is None:
                    change = event_data(event)
                sub.push(Item("change", partition, offset, change, event))
                self.delivered += 1
            elif before is not None and before.may_read(sub.principal, sub.groups):
                sub.push(Item("access-revoked", partition, offset, revoked_data(event), event))

    def close(self) -> None:
        """Stop the thread, cut every subscriber off (SHUTDOWN) and close the consumer."""
        self._running = False
        if self._thread is not None:
            self._thread.join(5)
        for sub in self._everyone():
            sub.stop("SHUTDOWN")
        if self._consumer is not None:
            self._consumer.close()
