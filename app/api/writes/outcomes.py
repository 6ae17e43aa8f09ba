"""Waiting for the validator's decisions: one consumer of events and rejections per API process.

Each process assigns itself every partition of both topics from their ends at start (no consumer group
coordination, so any number of API processes each see every outcome) and keeps a bounded cache of outcome
*summaries* (``app.api.writes.summary``: never documents or patches) keyed by (principal, command_id): a command id is an
idempotency key of its principal, so one principal's key never names, answers or reveals another's command.

A waiter for (principal, command_id, issued_at) is resolved only by the decision of that very attempt (same
``occurred_at``): the validator decides every attempt, a retry of an accepted command as DUPLICATE naming the
original outcome, a reused key with a different request as IDEMPOTENCY_KEY_REUSED. An earlier attempt's
event or rejection is never the answer to a later one.

Bounds: at most ``max_bytes`` (estimated) and ``max_entries`` command ids, oldest evicted first, one principal's
outcomes at most ``share`` of both (its own oldest evicted first); at most ``max_waiters`` concurrent waiters
(``reserve_waiter``), one principal's at most ``waiter_share`` of them. Only outcomes written after this process started are
known to ``lookup``; ``GET /commands/{id}`` looks older or evicted ones up in the audit trail (``durable_lookup``).
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

from confluent_kafka import (
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from app.api.writes.summary import OutcomeSummary, summarize
from app.kafka_client import RECONNECT
from commands import DEFAULT_LIMITS, Event, Rejection
from commands.command import utf8_size
from projections.audit.outcomes import AuditOutcomes
from schemas import codec
from schemas.wire import DecodeError

log = logging.getLogger(__name__)

Outcome = Event | Rejection
Key = tuple[str, str]  # (principal, command_id)
_Waiter = tuple[datetime, asyncio.AbstractEventLoop, "asyncio.Future[OutcomeSummary]"]
#: Summaries kept per command id: its event and the latest rejections of its attempts.
PER_COMMAND = 4
#: Estimated bytes of the indexes beyond the summaries (measured with tracemalloc, CPython 3.11): a command id's
#: entry in the cache-wide order (node and key tuple), and a principal's segment (its object and OrderedDict).
KEY_OVERHEAD = 160
SEGMENT_OVERHEAD = 512


class _Segment:
    """One principal's summaries by command id, least recently offered first, and their estimated bytes."""

    __slots__ = ("known", "nbytes")

    def __init__(self) -> None:
        self.known: OrderedDict[str, list[OutcomeSummary]] = OrderedDict()
        self.nbytes = 0


def _answerable(s: OutcomeSummary) -> bool:
    # Ids the API never accepts (over Limits.max_id_bytes) belong to no API request: not worth memory.
    bound = DEFAULT_LIMITS.max_id_bytes
    return all(t is None or utf8_size(t) <= bound for t in (s.command_id, s.principal, s.object_id))


class _OverShare:
    """What ``reserve_waiter`` answers a principal that already holds its share of the waiters (falsy: no slot)."""

    def __bool__(self) -> bool:
        return False


OVER_SHARE = _OverShare()


class OutcomeCache:
    """Recent outcome summaries by (principal, command_id) and the waiters on them; thread-safe.

    Fair shares (issue 25): each principal's summaries are a segment of its own, held to ``share`` of
    ``max_entries`` and ``max_bytes`` (its own oldest go first), so one principal's flood never evicts another's
    outcomes; the total bound evicts the least recently offered of anyone. A principal holds at most
    ``waiter_share`` of ``max_waiters``.
    """

    def __init__(self, *, max_bytes: int, max_entries: int, max_waiters: int,
                 on_outcome: Callable[[Outcome], None] | None = None, waiter_share: float = 1.0,
                 share: float = 1.0) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.max_waiters = max_waiters
        self.share_entries = max(1, int(max_entries * share))
        self.share_bytes = max(1, int(max_bytes * share))
        self.waiters_per_principal = max(1, int(max_waiters * waiter_share))
        self._on_outcome = on_outcome
        self._lock = threading.Lock()
        self._segments: dict[str, _Segment] = {}
        self._order: OrderedDict[Key, None] = OrderedDict()  # every key, least recently offered first
        self._bytes = 0
        self._waiters: dict[Key, list[_Waiter]] = {}
        self._reserved = 0
        self._reserved_by: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._order)

    @property
    def nbytes(self) -> int:
        """Estimated bytes the cached summaries hold."""
        return self._bytes

    @property
    def waiting(self) -> int:
        """Waiter slots in use."""
        return self._reserved

    def offer(self, outcome: Outcome, partition: int | None = None, offset: int | None = None,
              written_ms: int | None = None) -> None:
        """Record an outcome read at ``partition``/``offset`` (from any thread), written at ``written_ms`` (its
        record's timestamp), and wake the waiters of the attempt it decides."""
        if self._on_outcome is not None:
            self._on_outcome(outcome)
        summary = summarize(outcome, partition, offset, written_ms)
        if summary is None or not _answerable(summary):
            return
        principal, cid = summary.principal, summary.command_id
        key = (principal, cid)
        with self._lock:
            seg = self._segments.get(principal)
            if seg is None:
                seg = self._segments[principal] = _Segment()
                self._bytes += SEGMENT_OVERHEAD
            seen = seg.known.pop(cid, None)
            if seen is None:
                seen = []
                seg.nbytes += KEY_OVERHEAD
                self._bytes += KEY_OVERHEAD
            else:
                del self._order[key]
            seen.append(summary)
            seg.nbytes += summary.nbytes
            self._bytes += summary.nbytes
            if len(seen) > PER_COMMAND:
                # keep the event (it names the command's outcome) and the newest rejections
                drop = next((s for s in seen if s.kind == "rejected"), seen[0])
                seen.remove(drop)
                seg.nbytes -= drop.nbytes
                self._bytes -= drop.nbytes
            seg.known[cid] = seen
            self._order[key] = None
            # the principal's own share first: a flood evicts its own oldest outcomes, nobody else's
            while len(seg.known) > 1 and (seg.nbytes > self.share_bytes or len(seg.known) > self.share_entries):
                old_cid, old = seg.known.popitem(last=False)
                del self._order[(principal, old_cid)]
                self._forget(seg, old)
            while len(self._order) > 1 and (self._bytes > self.max_bytes or len(self._order) > self.max_entries):
                (old_principal, old_cid), _ = self._order.popitem(last=False)
                old_seg = self._segments[old_principal]
                self._forget(old_seg, old_seg.known.pop(old_cid))
                if not old_seg.known:
                    del self._segments[old_principal]
                    self._bytes -= SEGMENT_OVERHEAD
            woken: list[_Waiter] = []
            waiters = self._waiters.get(key)
            if waiters:
                woken = [w for w in waiters if w[0] == summary.occurred_at]
                if woken:
                    rest = [w for w in waiters if w[0] != summary.occurred_at]
                    if rest:
                        self._waiters[key] = rest
                    else:
                        del self._waiters[key]
        for _, loop, fut in woken:
            loop.call_soon_threadsafe(_resolve, fut, summary)

    def _forget(self, seg: _Segment, old: list[OutcomeSummary]) -> None:
        gone = KEY_OVERHEAD + sum(s.nbytes for s in old)
        seg.nbytes -= gone
        self._bytes -= gone

    def lookup(self, principal: str, command_id: str) -> OutcomeSummary | None:
        """Return the outcome of ``principal``'s command: its event if accepted, else its latest rejection."""
        with self._lock:
            seg = self._segments.get(principal)
            seen = seg.known.get(command_id) if seg is not None else None
            if not seen:
                return None
            return next((s for s in seen if s.kind == "accepted"), seen[-1])

    def reserve_waiter(self, principal: str) -> bool | _OverShare:
        """Take one of ``max_waiters`` slots for ``principal``'s ``Prefer: wait`` request.

        False when all are taken; ``OVER_SHARE`` (falsy) when ``principal`` already holds its share of them.
        """
        with self._lock:
            if self._reserved >= self.max_waiters:
                return False
            held = self._reserved_by.get(principal, 0)
            if held >= self.waiters_per_principal:
                return OVER_SHARE
            self._reserved_by[principal] = held + 1
            self._reserved += 1
            return True

    def release_waiter(self, principal: str) -> None:
        """Give back a slot taken by ``reserve_waiter``."""
        with self._lock:
            self._reserved -= 1
            held = self._reserved_by.pop(principal) - 1
            if held:
                self._reserved_by[principal] = held

    async def wait(self, principal: str, command_id: str, issued_at: datetime,
                   timeout: float) -> OutcomeSummary | None:
        """Return the decision of the attempt issued at ``issued_at``, or None after ``timeout`` seconds."""
        key = (principal, command_id)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[OutcomeSummary] = loop.create_future()
        entry: _Waiter = (issued_at, loop, fut)
        with self._lock:
            seg = self._segments.get(principal)
            for s in (seg.known.get(command_id, ()) if seg is not None else ()):
                if s.occurred_at == issued_at:
                    return s
            self._waiters.setdefault(key, []).append(entry)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            with self._lock:
                waiters = self._waiters.get(key)
                if waiters and entry in waiters:
                    waiters.remove(entry)
                    if not waiters:
                        del self._waiters[key]


def durable_lookup(audit: AuditOutcomes, principal: str, command_id: str) -> OutcomeSummary | None:
    """Return the outcome of ``principal``'s command from the audit trail, as ``OutcomeCache.lookup`` would.

    Its event if accepted, else its latest rejection; None for a command the trail does not hold for ``principal``
    (another principal's included).
    """
    summaries = [s for d in audit.decisions(principal, command_id)
                 if (s := summarize(d.outcome, d.partition, d.offset)) is not None]
    accepted = next((s for s in summaries if s.kind == "accepted"), None)
    if accepted is not None or not summaries:
        return accepted
    return max(summaries, key=lambda s: s.occurred_at.timestamp() if s.occurred_at else 0.0)


def records(consumer: Consumer, timeout: float, what: str, *, prompt: bool = False) -> list[Message]:
    """Return the records of one ``consume`` (up to 500 in ``timeout`` s); errors are logged as ``what``'s, not returned.

    ``prompt``: return as soon as one record is there (with those already fetched), not after ``timeout``.
    """
    try:
        if prompt:
            first = consumer.poll(timeout)
            msgs = [] if first is None else [first, *consumer.consume(499, 0)]
        else:
            msgs = consumer.consume(500, timeout)
    except KafkaException as e:  # pragma: no cover - librdkafka reports most trouble per message
        log.warning("%s: %s", what, e)
        return []
    good = []
    for msg in msgs:
        err = msg.error()
        if err is None:
            good.append(msg)
        elif err.code() != KafkaError._PARTITION_EOF:
            log.warning("%s: %s", what, err)
    return good


def _resolve(fut: asyncio.Future[OutcomeSummary], summary: OutcomeSummary) -> None:
    if not fut.done():
        fut.set_result(summary)


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
            **RECONNECT,
            **(kafka_config or {}),
            "logger": log,
        })
        self._consumer.assign(self._ends(topics, partitions))
        self._running = True
        self.restarts = 0
        self.last_error: str | None = None
        self._thread = self._start()

    def _start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="arbiter-api-outcomes", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        # Any error restarts the loop on the same consumer (its positions kept), counted and shown by /healthz:
        # a dead consumer would leave every later ``Prefer: wait`` to time out.
        while self._running:
            try:
                self._loop()
            except Exception as e:  # noqa: BLE001 - anything, so the thread never dies
                self.restarts += 1
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("outcomes: the consumer loop failed (restart %d)", self.restarts)
                time.sleep(min(0.1 * self.restarts, 2.0))

    def ensure_running(self) -> bool:
        """Start the thread again if it died anyway (``BaseException``); return True if it had to."""
        if self._running and not self._thread.is_alive():
            self.restarts += 1
            self.last_error = self.last_error or "the consumer thread had stopped"
            self._thread = self._start()
            return True
        return False

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
            for msg in records(self._consumer, 0.1, "outcomes"):
                try:
                    outcome = codec.decode_outcome(msg.value())
                except DecodeError as e:
                    self.undecodable += 1
                    log.warning("outcomes: undecodable record %s[%d]@%d: %s", msg.topic(), msg.partition(),
                                msg.offset(), e)
                    continue
                kind, ms = msg.timestamp()
                self.cache.offer(outcome, msg.partition(), msg.offset(), ms if kind != TIMESTAMP_NOT_AVAILABLE else None)

    def close(self) -> None:
        """Stop the thread and close the consumer."""
        self._running = False
        self._thread.join(5)
        self._consumer.close()
