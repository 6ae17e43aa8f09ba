"""A lease on a checkpoint across hosts: the one member of a Kafka consumer group that owns a one-partition topic.

Each checkpoint has its own group (``lease_group``). A driver joins it as a static member whose
``group.instance.id`` is a digest of its host, its local state directory and the checkpoint
(``instance_id``): a restart of the same driver, even after ``kill -9``, replaces its old member at once,
while a driver anywhere else is another member. ``cooperative-sticky`` keeps the lease partition with its
owner when another member joins; the coordinator takes it away only when the owner's session expires
(``session.timeout.ms`` without a heartbeat: a crash or a network partition) or it stops polling for
``max.poll.interval.ms``, and then the owner is told (``on_lost``) so it can stop writing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from app.errors import ArbiterError, BrokerUnavailable
from app.kafka_client import RECONNECT

log = logging.getLogger("arbiter.validator.lease")

LEASE_PARTITION = 0
# A new group's coordinator may still be loading or moving: describe again.
COORDINATOR_MOVING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS}
# A lease topic created a moment ago may be missing from the client's first metadata: librdkafka reports it as
# a non-retriable error message, but the next metadata refresh finds it, so the acquire keeps waiting.
TOPIC_NOT_YET_KNOWN = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
POLL_S = 0.2  # the poll thread's cadence; callbacks (assign, revoke, lost) run inside poll


class CheckpointLeased(ArbiterError):
    """Another validator driver, on this host or another, holds the checkpoint's lease: this one did not start."""

    code = "CHECKPOINT_LEASED"


class LeaseJoinFailed(ArbiterError):
    """The broker refused this driver's join of the lease group (e.g. a session timeout outside its bounds)."""

    code = "LEASE_JOIN_FAILED"


class LeaseLost(ArbiterError):
    """The running validator lost its lease to another member (or was fenced by its own instance id) and stopped."""

    code = "LEASE_LOST"


def lease_group(checkpoint: str) -> str:
    """Return the consumer group that holds ``checkpoint``'s lease (one group per checkpoint URI)."""
    return f"arbiter-validator-lease-{hashlib.sha256(checkpoint.encode()).hexdigest()[:16]}"


def instance_id(host: str, local_dir: Path | str, checkpoint: str) -> str:
    """Return the static member id of the driver on ``host`` keeping ``checkpoint``'s local state in ``local_dir``."""
    raw = "\0".join([host, os.path.abspath(local_dir), checkpoint])
    return f"arbiter-validator-{hashlib.sha256(raw.encode()).hexdigest()[:24]}"


def client_id(host: str, pid: int) -> str:
    """Return the Kafka client id of a lease: it names the holder in another driver's refusal."""
    return f"arbiter-validator@{host}:pid{pid}"


@dataclass(frozen=True)
class LeaseConfig:
    """Where and how one driver takes one checkpoint's lease."""

    bootstrap: str
    topic: str
    checkpoint: str
    instance_id: str
    client_id: str
    session_timeout_ms: int = 10_000
    max_poll_interval_ms: int = 30_000
    acquire_timeout_s: float = 20.0
    kafka_config: dict[str, str] = field(default_factory=dict)  # security and other librdkafka options

    @property
    def group(self) -> str:
        return lease_group(self.checkpoint)


@dataclass(frozen=True)
class Holder:
    """The group member that owns the lease partition, as ``describe_consumer_groups`` reports it."""

    client_id: str
    host: str
    instance_id: str | None

    def __str__(self) -> str:
        return f"{self.client_id} (from {self.host.lstrip('/')})"


CUT_OFF = "cut off"        # the coordinator did not answer: this driver's session lapsed while Kafka was unreachable
EXPIRED = "expired"        # the coordinator answers and no other member holds the lease
TAKEN = "taken"            # another member owns the lease now
FENCED = "fenced"          # a member with this driver's instance id replaced it


@dataclass(frozen=True)
class LossCause:
    """Why a held lease was lost, found after the query stopped (``ValidatorLease.loss_cause``)."""

    kind: str                 # CUT_OFF, EXPIRED, TAKEN or FENCED
    holder: Holder | None     # the member owning the lease now, when the coordinator said
    detail: str               # what the coordinator or the client reported

    @property
    def may_rejoin(self) -> bool:
        """True when no other driver is known to own the checkpoint: this one may take its lease back."""
        return self.kind in (CUT_OFF, EXPIRED)


class ValidatorLease:
    """One driver's lease on one checkpoint: ``acquire``, keep it by polling in a daemon thread, ``release``.

    ``on_lost(reason)`` runs (in a thread of its own) if the coordinator takes the lease away while held.
    """

    def __init__(self, config: LeaseConfig, on_lost: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.on_lost = on_lost
        self.lost_reason: str | None = None
        self._fenced_by_id = False  # the loss came from FENCED_INSTANCE_ID: a same-id member replaced this one
        self.join_error: KafkaError | None = None  # the last error the group join reported, if any
        self._consumer: Consumer | None = None
        self._assigned = threading.Event()
        self._releasing = False
        self._stop = threading.Event()
        self._poll_lock = threading.Lock()  # held by each poll; a test holds it to stall the poll thread
        self._thread: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._assigned.is_set() and self.lost_reason is None

    def _common(self) -> dict[str, Any]:
        return {**RECONNECT, **self.config.kafka_config, "bootstrap.servers": self.config.bootstrap, "log_level": 0}

    def holder(self, timeout_s: float = 10.0) -> Holder | None:
        """Return the member that owns the lease partition now, or None; ``BrokerUnavailable`` if the coordinator
        does not answer a request within ``timeout_s`` (retried for half as long again)."""
        admin = AdminClient(self._common())
        deadline = time.monotonic() + 1.5 * timeout_s
        while True:
            try:
                group = admin.describe_consumer_groups([self.config.group], request_timeout=timeout_s)[
                    self.config.group].result(timeout=1.5 * timeout_s)
                break
            except KafkaException as e:
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if err is not None and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                    return None
                if err is None or not (err.retriable() or err.code() in COORDINATOR_MOVING) or time.monotonic() > deadline:
                    raise BrokerUnavailable(f"cannot check the lease on {self.config.checkpoint} (group "
                                            f"{self.config.group} at {self.config.bootstrap}): {e}") from e
                time.sleep(0.2)
        for m in group.members:
            owned = m.assignment.topic_partitions if m.assignment is not None else []
            if any(tp.topic == self.config.topic and tp.partition == LEASE_PARTITION for tp in owned):
                return Holder(m.client_id, m.host, m.group_instance_id)
        return None

    def check(self) -> None:
        """Raise ``CheckpointLeased`` if a member other than this driver's instance owns the lease (no join)."""
        holder = self.holder()
        if holder is not None and holder.instance_id != self.config.instance_id:
            raise CheckpointLeased(self._refusal(holder, "holds"))

    def _refusal(self, holder: Holder | None, verb: str) -> str:
        who = str(holder) if holder is not None else "another validator driver"
        return (f"checkpoint {self.config.checkpoint} is leased: {who} {verb} its lease (Kafka group "
                f"{self.config.group}). Stop that validator first; if it crashed, its lease expires "
                f"{self.config.session_timeout_ms / 1000:g} s after its last heartbeat, then start this one again")

    def acquire(self) -> None:
        """Check, join the lease group and wait for the lease partition; raise ``CheckpointLeased`` if not had."""
        self.check()
        t0 = time.monotonic()
        conf: dict[str, Any] = {
            **self._common(), "group.id": self.config.group, "group.instance.id": self.config.instance_id,
            "client.id": self.config.client_id, "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": self.config.session_timeout_ms,
            "heartbeat.interval.ms": max(100, self.config.session_timeout_ms // 4),
            "max.poll.interval.ms": max(self.config.max_poll_interval_ms, self.config.session_timeout_ms),
            "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "latest",
            "error_cb": self._on_error,
        }
        self._consumer = Consumer(conf)
        self._consumer.subscribe([self.config.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)
        self._thread = threading.Thread(target=self._poll, name=f"lease-{self.config.group}", daemon=True)
        self._thread.start()
        deadline = t0 + self.config.acquire_timeout_s
        while not self._assigned.wait(0.05) and time.monotonic() < deadline:
            error = self.join_error
            if error is not None and not error.retriable() and error.code() not in TOPIC_NOT_YET_KNOWN:
                break  # e.g. INVALID_SESSION_TIMEOUT: waiting longer cannot help
        if not self._assigned.is_set() or self.lost_reason is not None:
            error = self.join_error
            try:
                holder = self.holder()
            except BrokerUnavailable:
                self.release()
                raise
            self.release()
            if holder is None and error is not None:
                raise LeaseJoinFailed(
                    f"the broker refused this driver's join of lease group {self.config.group}: {error.name()} "
                    f"({error.str()}); check ARBITER_LEASE_SESSION_TIMEOUT_MS ({self.config.session_timeout_ms}) "
                    "against the broker's group.min.session.timeout.ms and group.max.session.timeout.ms, and the "
                    "client's rights on the group and the lease topic")
            raise CheckpointLeased(self._refusal(holder, f"kept for {self.config.acquire_timeout_s:g} s"))
        log.info("lease on %s acquired in %.2f s: group %s, member %s (%s)", self.config.checkpoint,
                 time.monotonic() - t0, self.config.group, self.config.instance_id, self.config.client_id)

    def loss_cause(self) -> LossCause:
        """Ask the coordinator, after a loss, what happened: cut off from it, expired, taken by another, or fenced."""
        reason = self.lost_reason or "not lost"
        if self._fenced_by_id:
            return LossCause(FENCED, None, reason)
        try:
            # One session: a coordinator that does not answer for that long is what lapsed the membership. A slow
            # answer read as "cut off" is safe: taking the lease back is then refused if another member holds it.
            holder = self.holder(timeout_s=max(1.0, self.config.session_timeout_ms / 1000))
        except BrokerUnavailable as e:
            return LossCause(CUT_OFF, None, f"{reason}; the group coordinator does not answer: {e}")
        if holder is not None and holder.instance_id != self.config.instance_id:
            return LossCause(TAKEN, holder, reason)
        return LossCause(EXPIRED, holder, reason)

    def release(self) -> None:
        """Stop polling and close the consumer (idempotent). A static member stays in the group until its session
        expires, so another driver gets the lease ``session.timeout.ms`` later."""
        self._releasing = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as e:  # a fenced consumer may refuse to close cleanly
                log.debug("closing the lease consumer of %s: %s", self.config.group, e)
        self._assigned.clear()

    def _poll(self) -> None:
        while not self._stop.is_set():
            with self._poll_lock:
                consumer = self._consumer
                if consumer is None or self._stop.is_set():
                    return
                try:
                    msg = consumer.poll(POLL_S)
                    if msg is not None and msg.error() is not None:  # the group join's errors arrive as messages
                        self.join_error = msg.error()
                        log.debug("lease consumer of %s: %s", self.config.group, msg.error())
                except (KafkaException, RuntimeError) as e:
                    self._lose(f"polling the lease consumer failed: {e}")
                    return

    def _owns(self, partitions: list[TopicPartition]) -> bool:
        return any(tp.topic == self.config.topic and tp.partition == LEASE_PARTITION for tp in partitions)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._owns(partitions):
            self._assigned.set()

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._owns(partitions) and not self._releasing:
            self._lose("the group coordinator revoked the lease partition")

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._owns(partitions) and not self._releasing:
            self._lose("this driver's membership of the lease group lapsed (no heartbeat answered within "
                       f"{self.config.session_timeout_ms} ms, or no poll within max.poll.interval.ms)")

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal() and self._assigned.is_set() and not self._releasing:
            self._fenced_by_id = err.code() == KafkaError.FENCED_INSTANCE_ID
            self._lose(f"fatal lease consumer error: {err}")  # e.g. FENCED_INSTANCE_ID: a same-id member replaced us
        else:
            log.debug("lease consumer of %s: %s", self.config.group, err)

    def _lose(self, reason: str) -> None:
        if self.lost_reason is not None:
            return
        self.lost_reason = reason
        log.error("lease on %s lost: %s", self.config.checkpoint, reason)
        if self.on_lost is not None:
            threading.Thread(target=self.on_lost, args=(reason,), name="lease-lost", daemon=True).start()


def local_host() -> str:
    """Return this host's name as the lease sees it."""
    return socket.gethostname()
