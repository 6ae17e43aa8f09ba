"""The commands producer: acks=all, idempotent, murmur2 partitioning; answers only after the broker acknowledged.

Delivery reports are served on the event loop itself, by polling every millisecond while records are in
flight; a batch's future is resolved once, by its last report. A delivery error or no report
within ``produce_timeout_s`` raises ``BrokerUnavailable`` (→ 503): the command may or may not be stored,
which is why clients retry with the same Idempotency-Key and the validator deduplicates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer

from app import limits
from app.api.problems import ApiError
from app.errors import BrokerUnavailable
from app.kafka_client import RECONNECT
from app.settings import Settings
from app.signing import signer_for
from app.traces import current_headers

if TYPE_CHECKING:
    from app.rescale.generation import Generation

log = logging.getLogger(__name__)

#: Options that make "202" mean "durably in Kafka, on the partition a Java client would pick"; not overridable.
SAFETY = {"acks": "all", "enable.idempotence": True, "partitioner": "murmur2_random"}
PRODUCE_CHUNK = 512  # records a batch queues between yields of the event loop
POLL_INTERVAL_S = 0.001  # delivery reports are served at most this late while records are in flight
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, getattr(KafkaError, "RECORD_LIST_TOO_LARGE", -1)}


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where the broker stored a record."""

    partition: int
    offset: int


def producer_config(settings: Settings, *, traced: bool = False) -> dict[str, Any]:
    """Return the librdkafka configuration: defaults, then ``kafka_config`` pass-through, then SAFETY."""
    timeout_ms = int(settings.produce_timeout_s * 1000)
    return {
        "bootstrap.servers": settings.kafka_bootstrap,
        "linger.ms": 2,
        "socket.nagle.disable": True,  # small produce requests must not wait for delayed ACKs
        "queue.buffering.max.messages": 2_000_000,
        **limits.api_producer_config(settings, traced=traced),  # message.max.bytes: a command that could not fit its topic is 413
        "message.timeout.ms": timeout_ms,
        "request.timeout.ms": min(timeout_ms, 30_000),
        "socket.connection.setup.timeout.ms": min(timeout_ms, 10_000),
        **RECONNECT,
        **settings.kafka_config,
        **SAFETY,
    }


ArbiterExc = ApiError | BrokerUnavailable


def _refusal(e: KafkaException) -> ArbiterExc:
    err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if err is not None:
        return _failure(err)
    return BrokerUnavailable(f"cannot produce the command: {e}")


def _failure(err: KafkaError) -> ArbiterExc:
    if err.code() in _TOO_LARGE:
        return ApiError(f"the broker refused the record as too large: {err.str()}", code="TOO_LARGE")
    return BrokerUnavailable(f"the broker did not acknowledge the command: {err.str()}")


class _Batch:
    """Delivery reports of one batch; the loop is woken once, when the last report arrives."""

    __slots__ = ("fut", "owner", "pending", "results")

    def __init__(self, owner: CommandProducer, n: int) -> None:
        self.owner = owner
        self.fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending = n
        self.results: list[Delivered | KafkaError | ArbiterExc | None] = [None] * n

    def report(self, i: int, err: KafkaError | None, msg: Any) -> None:
        self.results[i] = err if err is not None else Delivered(msg.partition(), msg.offset())
        self._done()

    def refuse(self, i: int, exc: ArbiterExc) -> None:
        """Record that record ``i`` was never queued (librdkafka refused it in ``produce``): no report will come."""
        self.results[i] = exc
        self._done()

    def _done(self) -> None:
        self.pending -= 1
        self.owner._inflight -= 1
        if self.pending == 0 and not self.fut.done():
            self.fut.set_result(None)


def _result(r: Delivered | KafkaError | ArbiterExc | None) -> Delivered | ArbiterExc:
    if isinstance(r, KafkaError):
        return _failure(r)
    return r if r is not None else BrokerUnavailable("no delivery report")


def _with_trace(sign: Callable[[bytes | None, bytes], list[tuple[str, bytes]]]) -> Callable[
        [bytes | None, bytes], list[tuple[str, bytes]]]:
    def headers(key: bytes | None, value: bytes) -> list[tuple[str, bytes]]:
        return [*sign(key, value), *current_headers()]

    return headers


class GenerationView(Protocol):
    """What the producer reads of the commands topic's generation (``app.rescale.generation.GenerationWatch``)."""

    @property
    def generation(self) -> Generation: ...


class CommandProducer:
    """One confluent-kafka producer per API process; its delivery reports are served on the event loop."""

    def __init__(self, settings: Settings, *, traced: bool = False, generation: GenerationView | None = None) -> None:
        self.settings = settings
        self.topic = settings.topic_commands
        # The commands topic's current generation (app.rescale.generation.GenerationWatch): writes follow it to a
        # rescaled topic and are refused while a rescale cuts over. None: always ``topic_commands``.
        self.generation = generation
        self.traced = traced
        sign = signer_for(settings).headers  # every command record carries its signature (app/signing.py)
        # ... and, when this process traces, the context of the current span (app/traces.py): its write's span
        self._sign = _with_trace(sign) if traced else sign
        self._config = producer_config(settings, traced=traced)
        self._fatal: KafkaError | None = None
        self._producer = self._new_producer()
        self._inflight = 0
        self._poller: asyncio.Task[None] | None = None
        self._retired: list[Producer] = []  # replaced after a fatal error, polled until their reports are served

    def _new_producer(self) -> Producer:
        return Producer({**self._config, "error_cb": self._on_error, "logger": log})

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            log.error("producer fatal error, it will be replaced: %s", err.str())
            self._fatal = err
        else:
            log.warning("producer: %s", err.str())

    def _track(self, n: int) -> None:
        # Delivery reports are served on the event loop by polling while records are in flight: no thread,
        # so no GIL hand-offs (each costs up to the 5 ms switch interval under load) and no cross-thread wakeups.
        self._inflight += n
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll_while_inflight())

    async def _poll_while_inflight(self) -> None:
        while self._inflight > 0:
            try:
                self._live()  # a fatal error (reported by this poll's error_cb) retires the producer at once
                self._producer.poll(0)
                if self._retired:
                    for old in self._retired:
                        old.poll(0)
                    self._retired = [old for old in self._retired if len(old)]
            except Exception:  # a report callback failed; the others must still be served
                log.exception("producer: serving delivery reports failed")
            await asyncio.sleep(POLL_INTERVAL_S)

    def _live(self) -> Producer:
        if self._fatal is not None:  # an idempotent producer that hit a fatal error must be replaced
            old, self._fatal = self._producer, None
            self._producer = self._new_producer()
            # Its queued and in-flight records are purged: each still gets a (failed) delivery report, served by
            # the poller until none is left, so every waiting request answers 503 and none waits out its timeout.
            old.purge()
            self._retired.append(old)
        return self._producer

    async def _produce(self, producer: Producer, key: bytes, value: bytes, callback: Any) -> None:
        """Queue one record, waiting while the local queue is full; librdkafka's refusals raise ``KafkaException``."""
        while True:
            try:
                producer.produce(self.topic, value, key, on_delivery=callback, headers=self._sign(key, value))
                return
            except BufferError:  # local queue full: let the poller serve reports, which frees it
                await asyncio.sleep(0.005)

    def _follow(self) -> None:
        """Point ``topic`` at the current generation; raise ``WRITES_PAUSED`` (503) while a rescale cuts over."""
        if self.generation is None:
            return
        now = self.generation.generation
        if now.paused:
            raise ApiError(f"writes are paused while the commands topic is rescaled (generation {now.number}, "
                           f"{now.topic}); nothing was produced", code="WRITES_PAUSED",
                           headers={"Retry-After": str(self.settings.retry_after_s)})
        self.topic = now.topic

    async def send(self, key: str, value: bytes) -> Delivered:
        """Produce one record keyed ``key`` and return where it was stored once the broker acknowledged it."""
        self._follow()
        batch = _Batch(self, 1)
        try:
            await self._produce(self._live(), key.encode("utf-8"), value, partial(batch.report, 0))
        except KafkaException as e:  # e.g. over message.max.bytes: nothing was queued
            raise _refusal(e) from e
        self._track(1)
        await self._await(batch)
        result = _result(batch.results[0])
        if isinstance(result, Delivered):
            return result
        raise result

    async def send_many(self, records: Sequence[tuple[str, bytes]]) -> list[Delivered | ArbiterExc]:
        """Produce all records, then await all reports; one result per record, in order, never an exception.

        A record librdkafka refuses at once (over ``message.max.bytes``) gets its own 413/503 result and the
        others go on; the loop is yielded every ``PRODUCE_CHUNK`` records so a large batch never holds it long.
        """
        n = len(records)
        try:
            self._follow()
        except ApiError as e:  # paused for a rescale: every record answers 503, none was produced
            return [e] * n
        batch = _Batch(self, n)
        producer = self._live()
        produce, topic, sign = producer.produce, self.topic, self._sign
        self._track(n)  # before the first await, so reports are served while the loop below waits
        i = 0
        try:
            for i, (key, value) in enumerate(records):
                if i and not i % PRODUCE_CHUNK:
                    await asyncio.sleep(0)
                cb = partial(batch.report, i)
                k = key.encode("utf-8")
                try:
                    try:
                        produce(topic, value, k, on_delivery=cb, headers=sign(k, value))
                    except BufferError:
                        await self._produce(producer, key.encode("utf-8"), value, cb)
                except KafkaException as e:
                    batch.refuse(i, _refusal(e))
        except BaseException:  # cancelled: the records not yet queued will never be reported
            self._inflight -= n - i
            raise
        try:
            await self._await(batch)
        except BrokerUnavailable as e:  # no report in time: those records answer 503, the others what they got
            return [_result(r) if r is not None else e for r in batch.results]
        return [_result(r) for r in batch.results]

    async def _await(self, batch: _Batch) -> None:
        # librdkafka fails undelivered records at message.timeout.ms; the margin covers the report's trip here.
        try:
            await asyncio.wait_for(asyncio.shield(batch.fut), self.settings.produce_timeout_s + 2)
        except TimeoutError as e:
            raise BrokerUnavailable(f"no acknowledgement within {self.settings.produce_timeout_s}s") from e

    def broker_reachable(self, timeout: float = 2.0) -> bool:
        """Return True if the broker answers a metadata request for the commands topic."""
        try:
            md = self._producer.list_topics(self.topic, timeout=timeout)
        except KafkaException:
            return False
        t = md.topics.get(self.topic)
        return bool(md.brokers) and t is not None and t.error is None

    def close(self, timeout: float = 10.0) -> int:
        """Flush what is queued; return the number of records left undelivered."""
        return int(self._producer.flush(timeout))
