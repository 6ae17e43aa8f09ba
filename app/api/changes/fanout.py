"""One consumer of the events topic per API process, feeding every live subscriber through a bounded queue.

The feed's thread reads every partition from the high watermarks it found when it started (no consumer group),
decodes each event once, learns the roles before and after it (``roles.RolesBook``) when anyone follows that
object, and hands each subscriber only what it may see: the event if it may read the object after it, an
``access-revoked`` item if it could before and cannot after. Queues are bounded in events and in bytes, each
(``max_queue``, ``max_queue_bytes``) and all of the process's together (``Budget``): a subscriber whose queue is
full, or the one holding the most bytes when the process's budget is spent, is cut off — its queue dropped at
once, a final ``reset`` item in its place (it resumes from its last id) — never buffered without limit.

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


class Budget:
    """Bytes queued for every subscriber of one process, against a bound (thread-safe)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        """Count ``n`` more bytes queued if they fit under the bound; return whether they did."""
        with self._lock:
            if self.used + n > self.max_bytes:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


@dataclass(eq=False)
class Subscriber:
    """One stream's place in the feed: who it is, what it follows (one object or all) and its bounded queue.

    ``push`` runs on the feed's thread, ``pop`` on the stream's loop; both under the subscriber's own lock. A
    queued item counts ``len(item.data)`` bytes (an event queued for N streams counts N times: the bound is on
    what the queues could hold, whatever they share).
    """

    principal: str
    groups: tuple[str, ...]
    object_id: str | None
    max_queue: int
    max_bytes: int = 1 << 62
    budget: Budget = field(default_factory=lambda: Budget(1 << 62))
    loop: asyncio.AbstractEventLoop | None = None
    queue: deque[Item] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    cut: bool = False  # the feed stopped feeding it (overflow, roles unknown, shutdown); its last item says why
    dropped: asyncio.Event = field(default_factory=asyncio.Event)  # set (on the loop) when it is cut off
    queued: int = 0  # bytes queued now
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def push(self, item: Item) -> bool:
        """Queue ``item`` (from the feed's thread); on a full queue, cut the subscriber off instead. Return False,
        queueing nothing, when the process's budget cannot hold the item (the feed decides whom to cut)."""
        n = len(item.data)
        with self._lock:
            if self.cut:
                return True
            if len(self.queue) >= self.max_queue or self.queued + n > self.max_bytes:
                self._cut("SLOW_CONSUMER")
            elif not self.budget.take(n):
                return False
            else:
                self.queue.append(item)
                self.queued += n
        self._wake()
        return True

    def pop(self) -> Item | None:
        """Return the oldest queued item, None if there is none (on the stream's loop)."""
        with self._lock:
            if not self.queue:
                return None
            item = self.queue.popleft()
            if item.kind != "reset":
                self.queued -= len(item.data)
                self.budget.give(len(item.data))
            return item

    def _cut(self, code: str) -> None:
        # under ``_lock``: the queue goes at once (its bytes back to the process), only the ``reset`` stays
        self.cut = True
        self.budget.give(self.queued)
        self.queued = 0
        self.queue.clear()
        self.queue.append(Item("reset", -1, -1, code.encode()))
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.dropped.set)
        else:
            self.dropped.set()

    def _wake(self) -> None:
        # Set from the loop's thread; the stream clears ``wake`` before it looks at the queue, so a skipped set
        # (already set) is never a lost wake-up.
        if self.loop is not None and not self.wake.is_set():
            self.loop.call_soon_threadsafe(self.wake.set)

    def stop(self, code: str) -> None:
        """Cut the subscriber off with a ``reset`` ``code`` (its queue is dropped)."""
        with self._lock:
            if self.cut:
                return
            self._cut(code)
        self._wake()

    def release(self) -> None:
        """Drop what is still queued and take nothing more (the stream ended): its bytes go back to the process."""
        with self._lock:
            self.cut = True
            self.budget.give(self.queued)
            self.queued = 0
            self.queue.clear()


class ChangeFeed:
    """The process's live change feed: started by the first subscriber, then reading until ``close``."""

    def __init__(self, bootstrap: str, topic: str, roles: RolesSource, *, max_subscribers: int,
                 max_per_principal: int, max_queue: int, retry_after_s: int,
                 kafka_config: dict[str, str] | None = None, max_roles: int = 100_000,
                 max_queue_bytes: int = 1 << 62, max_total_bytes: int = 1 << 62) -> None:
        self.bootstrap, self.topic, self.kafka_config = bootstrap, topic, kafka_config or {}
        self.book = RolesBook(roles, topic, max_roles)
        self.max_subscribers, self.max_per_principal = max_subscribers, max_per_principal
        self.max_queue, self.retry_after_s = max_queue, retry_after_s
        self.max_queue_bytes = max_queue_bytes
        self.budget = Budget(max_total_bytes)
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
        sub.release()

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
                self._deliver(sub, Item("change", partition, offset, change, event))
                self.delivered += 1
            elif before is not None and before.may_read(sub.principal, sub.groups):
                self._deliver(sub, Item("access-revoked", partition, offset, revoked_data(event), event))

    def subscriber(self, principal: str, groups: tuple[str, ...], object_id: str | None) -> Subscriber:
        """Return a new subscriber held to this feed's bounds (not attached yet)."""
        return Subscriber(principal, groups, object_id, self.max_queue, self.max_queue_bytes, self.budget)

    def _deliver(self, sub: Subscriber, item: Item) -> None:
        """Queue ``item`` for ``sub``; while the process's budget cannot hold it, cut off the subscriber holding the
        most bytes (the slowest reader), ``sub`` itself if nobody holds any."""
        while not sub.push(item):
            hog = max(self._everyone(), key=lambda s: s.queued)
            if hog.queued == 0:
                sub.stop("SLOW_CONSUMER")
                return
            hog.stop("SLOW_CONSUMER")

    def close(self) -> None:
        """Stop the thread, cut every subscriber off (SHUTDOWN) and close the consumer."""
        self._running = False
        if self._thread is not None:
            self._thread.join(5)
        for sub in self._everyone():
            sub.stop("SHUTDOWN")
        if self._consumer is not None:
            self._consumer.close()
