"""A small confluent-kafka projection runner: batches, graceful SIGTERM, lag per partition, bad records kept as data."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, OFFSET_STORED, Consumer, KafkaError, KafkaException, TopicPartition
from opentelemetry.trace import Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from commands import Event, Rejection
from commands.errors import ArbiterError
from schemas import codec
from schemas.codec import DecodeError

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: A record's value to its decision; None for a record that is no decision but not broken either (the audit's rules
#: catalog records, ``projections.audit.deploys``); raises ``DecodeError`` for bytes that do not decode.
Decoder = Callable[[bytes], Event | Rejection | None]


# Record and Item are NamedTuples, not frozen dataclasses: built once per consumed record, they cost a quarter.
class Record(NamedTuple):
    """One Kafka record as the runner saw it, free of confluent-kafka types."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    trace: dict[str, str] | None = None  # its traceparent/tracestate headers, read only when the runner traces

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


_PROPAGATOR = TraceContextTextMapPropagator()  # W3C traceparent/tracestate only
_TRACE_HEADERS = ("traceparent", "tracestate")


def _trace_carrier(headers: list[tuple[str, bytes]] | None) -> dict[str, str] | None:
    """Return a record's trace context headers as the propagator reads them; None without a ``traceparent``."""
    if not headers:
        return None
    carrier: dict[str, str] = {}
    for name, value in headers:
        if name in _TRACE_HEADERS and name not in carrier and value is not None:
            carrier[name] = value.decode("latin-1")
    return carrier if "traceparent" in carrier else None


def _outcome_kind(outcome: Event | Rejection | None) -> str:
    return "undecodable" if outcome is None else "event" if isinstance(outcome, Event) else "rejection"


class OffsetOutOfRange(ArbiterError):
    """A projection's stored position is no longer in its partition (retention deleted records it never read)."""

    code = "OFFSET_OUT_OF_RANGE"


#: Where an operator may restart a projection whose position is out of range (``--reset-out-of-range``).
RESET_POSITIONS = ("earliest", "latest")


class Item(NamedTuple):
    """A record and what it decoded to: ``outcome`` is None and ``error`` says why when it did not decode (``outcome``
    and ``error`` both None: a record that is no decision, see ``Decoder``)."""

    record: Record
    outcome: Event | Rejection | None
    error: str | None = None


class Projection:
    """What a runner feeds. A projection that stores its offsets (``stores_offsets``) is the source of truth for them."""

    name = "projection"
    stores_offsets = False

    def start_offsets(self, partitions: Sequence[TP]) -> dict[TP, int]:
        """Return the next offset to read for each partition this projection has seen (none: Kafka decides)."""
        return {}

    def apply(self, items: Sequence[Item]) -> None:
        """Apply one batch; with ``stores_offsets``, atomically with the offsets after the batch."""
        raise NotImplementedError

    def figures(self) -> dict[str, int]:
        """Return the projection's own counters for its metrics (e.g. the DB projection's gaps); none by default."""
        return {}

    def handover(self) -> None:
        """Called when the consumer group moves partitions to or from this instance (several instances over one
        shared store): finish what is queued for the store and forget what only a sole writer may assume."""

    def reseek(self) -> dict[TP, int] | None:
        """Return offsets to jump to when the projection's store changed under it (a rebuild swap), else None."""
        return None

    def restart_at(self, tp: TP, lost_from: int | None, resume_at: int, reason: str) -> None:
        """Record that an operator restarted ``tp`` at ``resume_at`` though offsets from ``lost_from`` were never
        read (with ``stores_offsets``: durably, and as the new stored position, before the runner seeks)."""
        raise NotImplementedError(f"{self.name} projection cannot record a restart")

    def close(self) -> None:
        """Release the projection's resources."""


@dataclass
class RunnerConfig:
    """Plain configuration: no Settings, so ``projections`` stays independent of ``app``.

    ``assign_all`` reads every partition of ``topics`` with a manual assignment (each embedded store replica
    needs all of them); otherwise the group subscribes and Kafka spreads partitions over the members.
    """

    bootstrap: str
    topics: tuple[str, ...]
    group_id: str
    kafka_config: dict[str, str] = field(default_factory=dict)
    assign_all: bool = True
    batch_size: int = 2000
    poll_timeout_s: float = 0.5
    lag_interval_s: float = 15.0  # how often the lag is logged
    lag_measure_s: float = 1.0    # how often it is measured for the metrics (cached watermarks: no request)
    stop_when_caught_up: bool = False
    #: For a projection that stores its offsets, where to restart a partition whose stored position is out of
    #: range: None (stop with ``OffsetOutOfRange``), "earliest" or "latest"; the restart is recorded by the projection.
    reset_out_of_range: str | None = None


@dataclass
class RunStats:
    """Counters of one run; ``lag`` is the last measured lag per partition (replaced whole, never mutated, so a
    metrics thread can read it)."""

    records: int = 0
    batches: int = 0
    undecodable: int = 0
    batch_seconds: float = 0.0       # total time in ``apply`` and the commit after it
    last_batch_seconds: float = 0.0
    lag: dict[TP, int] = field(default_factory=dict)


class Runner:
    """Consume ``config.topics`` in batches into one projection until stopped (or caught up).

    With a ``tracer`` (OpenTelemetry), each record that carries a W3C trace context (its ``traceparent`` header,
    written by the validator) gets a span once its batch is applied and committed: ``<projection> apply``, child
    of that context, spanning the batch's apply and commit. Without one, headers are not even read.
    """

    def __init__(self, config: RunnerConfig, projection: Projection, decode: Decoder = codec.decode_outcome,
                 tracer: Tracer | None = None) -> None:
        self.config = config
        self.projection = projection
        self.decode = decode
        self.tracer = tracer
        self.stats = RunStats()
        self._stop = False
        self._assigned: list[TP] = []
        self._next: dict[TP, int] = {}
        self._consumer: Any = None

    def request_stop(self, *_: object) -> None:
        """Finish the batch in hand, then stop (safe from a signal handler)."""
        self._stop = True

    def install_signal_handlers(self) -> None:
        """Stop gracefully on SIGTERM and SIGINT."""
        def handler(signum: int, _frame: FrameType | None) -> None:
            log.info("%s projection: signal %d, stopping after the current batch", self.projection.name, signum)
            self.request_stop()
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # --- assignment ------------------------------------------------------------------------------
    def _resolve(self, tps: list[TP]) -> list[TopicPartition]:
        stored = self.projection.start_offsets(tps)
        default = OFFSET_BEGINNING if self.projection.stores_offsets else OFFSET_STORED
        self._next.update({tp: off for tp, off in stored.items()})
        log.info("%s projection: assigned %s, starting at %s", self.projection.name,
                 ", ".join(f"{t}[{p}]" for t, p in tps), {f"{t}[{p}]": o for (t, p), o in sorted(stored.items())} or "the start")
        return [TopicPartition(t, p, stored.get((t, p), default)) for t, p in tps]

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.projection.handover()
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self._assigned = sorted(set(self._assigned) | set(tps))
        consumer.assign(self._resolve(tps))

    def _on_revoke(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.projection.handover()  # the next owner resumes at the offsets stored: they must be written first
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._assigned = [tp for tp in self._assigned if tp not in gone]

    def _assign_all(self, consumer: Any) -> None:
        tps: list[TP] = []
        for topic in self.config.topics:
            md = consumer.list_topics(topic, timeout=10).topics[topic]
            if md.error is not None:
                raise KafkaException(md.error)
            tps += [(topic, p) for p in sorted(md.partitions)]
        self._assigned = tps
        consumer.assign(self._resolve(tps))

    # --- the loop --------------------------------------------------------------------------------
    def _consumer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.config.bootstrap,
            "group.id": self.config.group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
        conf.update(self.config.kafka_config)
        if self.projection.stores_offsets:
            # Never a silent jump past records nobody read: librdkafka reports ERR__AUTO_OFFSET_RESET instead.
            conf["auto.offset.reset"] = "error"
        return conf

    def run(self) -> RunStats:
        """Consume until ``request_stop`` (or caught up with ``stop_when_caught_up``); return the counters."""
        consumer = self._consumer = Consumer(self._consumer_config())
        try:
            if self.config.assign_all:
                self._assign_all(consumer)
            else:
                consumer.subscribe(list(self.config.topics), on_assign=self._on_assign, on_revoke=self._on_revoke)
            next_lag = time.monotonic() + self.config.lag_interval_s
            next_measure = time.monotonic()
            while not self._stop:
                msgs = consumer.consume(self.config.batch_size, self.config.poll_timeout_s)
                items = self._items(msgs)
                if items:
                    t0 = time.monotonic()
                    started_ns = time.time_ns() if self.tracer is not None else 0
                    self.projection.apply(items)
                    self._after_batch(consumer, items)
                    self.stats.last_batch_seconds = took = time.monotonic() - t0
                    self.stats.batch_seconds += took
                    if self.tracer is not None:
                        self._spans(self.tracer, items, started_ns, time.time_ns())
                if time.monotonic() >= next_measure:
                    self.stats.lag = self.lag(consumer, ask_broker=False)
                    next_measure = time.monotonic() + self.config.lag_measure_s
                reseek = self.projection.reseek()
                if reseek is not None:
                    self._seek(consumer, reseek)
                if len(msgs) < self.config.batch_size and self.config.stop_when_caught_up and self._caught_up(consumer):
                    break
                if time.monotonic() >= next_lag:
                    self.report_lag(consumer)
                    next_lag = time.monotonic() + self.config.lag_interval_s
            self.report_lag(consumer)
        finally:
            self.projection.close()
            consumer.close()
            self._consumer = None
        return self.stats

    def _items(self, msgs: list[Any]) -> list[Item]:
        items: list[Item] = []
        append, decode = items.append, self.decode  # the hot loop: once per consumed record
        traced = self.tracer is not None
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    self._out_of_range((m.topic(), m.partition()), str(err))
                    continue
                if err.fatal():
                    raise KafkaException(err)
                log.warning("%s projection: consumer error %s", self.projection.name, err)
                continue
            value = m.value()
            rec = Record(m.topic(), m.partition(), m.offset(), m.key(), value, m.timestamp()[1],
                         _trace_carrier(m.headers()) if traced else None)
            if value is None:
                append(self._bad(rec, "record has no value"))
                continue
            try:
                append(Item(rec, decode(value)))
            except DecodeError as e:
                append(self._bad(rec, f"{e.reason.value}: {e}"))
        return items

    def _spans(self, tracer: Tracer, items: list[Item], started_ns: int, ended_ns: int) -> None:
        from opentelemetry.trace import SpanKind, StatusCode

        name, group = f"{self.projection.name} apply", self.config.group_id
        for it in items:
            rec = it.record
            if rec.trace is None:
                continue
            span = tracer.start_span(name, context=_PROPAGATOR.extract(rec.trace), kind=SpanKind.CONSUMER,
                                     start_time=started_ns, attributes={
                                         "messaging.system": "kafka", "messaging.operation.type": "process",
                                         "messaging.destination.name": rec.topic,
                                         "messaging.destination.partition.id": str(rec.partition),
                                         "messaging.kafka.offset": rec.offset, "messaging.consumer.group.name": group,
                                         "arbiter.projection": self.projection.name,
                                         "arbiter.outcome": _outcome_kind(it.outcome)})
            if it.error is not None:
                span.set_status(StatusCode.ERROR, it.error)
            span.end(end_time=ended_ns)

    def _bad(self, rec: Record, why: str) -> Item:
        self.stats.undecodable += 1
        log.error("%s projection: undecodable record %s (%s); kept as data, moving on", self.projection.name, rec.where, why)
        return Item(rec, None, why)

    def _after_batch(self, consumer: Any, items: list[Item]) -> None:
        last: dict[TP, int] = {}
        for it in items:
            last[(it.record.topic, it.record.partition)] = it.record.offset + 1
        self._next.update(last)
        self.stats.records += len(items)
        self.stats.batches += 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in last.items()]
        # Offsets a projection keeps in its own store are committed to Kafka only for monitoring (lag tools).
        consumer.commit(offsets=offsets, asynchronous=self.projection.stores_offsets)

    def _out_of_range(self, tp: TP, why: str) -> None:
        """Stop with ``OffsetOutOfRange``, or restart ``tp`` where the operator said and have it recorded."""
        consumer = self._consumer
        low, high = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10, cached=False)
        lost_from = self._next.get(tp)
        where = f"{tp[0]}[{tp[1]}]"
        if self.config.reset_out_of_range is None:
            raise OffsetOutOfRange(
                f"{self.projection.name} projection: {where} position {lost_from} is out of range (the partition "
                f"holds offsets {low}..{high - 1}): records were deleted before this projection read them. Nothing "
                "was skipped; to go on without them, restart with --reset-out-of-range earliest (or latest), which "
                f"is recorded. ({why})")
        resume_at = low if self.config.reset_out_of_range == "earliest" else high
        reason = (f"operator restart with --reset-out-of-range {self.config.reset_out_of_range}: position "
                  f"{lost_from} out of range, partition holds {low}..{high - 1}")
        log.warning("%s projection: %s %s; resuming at %d", self.projection.name, where, reason, resume_at)
        self.projection.restart_at(tp, lost_from, resume_at, reason)
        self._next[tp] = resume_at
        # A seek is refused while the partition is in this error state: assign it afresh, at the new position.
        consumer.incremental_unassign([TopicPartition(*tp)])
        consumer.incremental_assign([TopicPartition(tp[0], tp[1], resume_at)])

    def _seek(self, consumer: Any, offsets: dict[TP, int]) -> None:
        self._next.update(offsets)
        tps = [TopicPartition(t, p, offsets.get((t, p), OFFSET_BEGINNING)) for t, p in self._assigned]
        if self.config.assign_all:
            consumer.assign(tps)
        else:
            for tp in tps:
                consumer.seek(tp)
        log.info("%s projection: store changed, resumed at its offsets", self.projection.name)

    def lag(self, consumer: Any, *, ask_broker: bool = True) -> dict[TP, int]:
        """Return high watermark minus next offset to read, per assigned partition (without ``ask_broker``, only
        partitions whose watermark a fetch has already brought: the loop measures often and must not wait)."""
        out: dict[TP, int] = {}
        positions = {(tp.topic, tp.partition): tp.offset
                     for tp in consumer.position([TopicPartition(t, p) for t, p in self._assigned])}
        for t, p in self._assigned:
            # Cached: the watermarks of the latest fetch response. A fresh query would queue behind the fetch
            # long-poll on the broker connection (fetch.wait.max.ms per partition).
            low, high = consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)
            if high < 0:
                if not ask_broker:
                    continue
                low, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=5, cached=False)
            # The client's position also steps over transaction markers, which no record of ours covers.
            pos = max(self._next.get((t, p), low), positions.get((t, p), -1), low)
            out[(t, p)] = max(0, high - pos)
        return out

    def report_lag(self, consumer: Any) -> None:
        self.stats.lag = self.lag(consumer)
        log.info("%s projection: lag %s (records %d, undecodable %d)", self.projection.name,
                 " ".join(f"{t}[{p}]={n}" for (t, p), n in sorted(self.stats.lag.items())),
                 self.stats.records, self.stats.undecodable)

    def _caught_up(self, consumer: Any) -> bool:
        return bool(self._assigned) and not any(self.lag(consumer).values())
