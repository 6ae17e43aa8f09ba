"""Idempotency-Key claims: one principal's key names one object, whichever API process or worker receives it.

Before a write with a client-chosen Idempotency-Key is produced, the API appends a claim (principal, key, object id,
issued_at) to the claims topic, keyed by (principal, key), so every claim of one key lands on one partition, in one
order. Every API process folds that topic from ``dedup_ttl`` (plus ``SLACK_MS``) ago with the pure
``commands.claims.settle``, waits until its fold has passed its own claim, and produces the command only if the key's
holder is the command's object; otherwise the write is 422 IDEMPOTENCY_KEY_REUSED and nothing is produced. Two
workers racing one key for two objects therefore agree: the first claim in the log wins, the other is refused.
A restarted process folds the same records again, so a key stays bound across restarts and replicas.

Only the API claims: a producer writing to the commands topic directly gets the validator's per-object
deduplication only (docs/security.md). Memory: one holder per key claimed within ``dedup_ttl``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from app.api.problems import ApiError
from app.api.writes.outcomes import records
from app.errors import BrokerUnavailable
from app.settings import Settings
from commands import Command
from commands.claims import Holder, KeyClaim, claim_of, expired, settle, won
from commands.state import Limits

log = logging.getLogger(__name__)

#: Holders are forgotten this long after they expired (and the fold starts this much earlier than ``dedup_ttl``
#: ago), so API hosts whose clocks differ by less than this still settle every claim alike.
SLACK_MS = 3600 * 1000
#: How often the fold looks for its own claim while a write waits for it.
WAIT_STEP_S = 0.002

Key = tuple[str, str]  # (principal, key)


def claim_record(claim: KeyClaim) -> tuple[bytes, bytes]:
    """Return the key and value of ``claim``'s record (the key partitions it: principal, U+0000, key)."""
    key = f"{claim.principal}\x00{claim.key}".encode()
    value = json.dumps({"principal": claim.principal, "key": claim.key, "object_id": claim.object_id,
                        "at_ms": claim.at_ms}, separators=(",", ":"), ensure_ascii=False).encode()
    return key, value


def read_claim(value: bytes) -> KeyClaim | None:
    """Return the claim in a record's value, or None for anything else."""
    try:
        d = json.loads(value)
        claim = KeyClaim(d["principal"], d["key"], d["object_id"], d["at_ms"])
    except (ValueError, TypeError, KeyError):
        return None
    ok = all(isinstance(v, str) for v in (claim.principal, claim.key, claim.object_id))
    return claim if ok and isinstance(claim.at_ms, int) else None


class ClaimFold:
    """The holders of the keys claimed so far, folded in each partition's offset order; thread-safe reads."""

    def __init__(self, limits: Limits, slack_ms: int = SLACK_MS) -> None:
        self.limits = limits
        self.slack_ms = slack_ms
        self.holders: dict[Key, Holder] = {}
        self.positions: dict[int, int] = {}  # partition -> next offset to fold
        self.skipped = 0
        self._newest = 0
        self._lock = threading.Lock()

    def add(self, partition: int, offset: int, value: bytes | None) -> None:
        """Fold the record at ``partition``/``offset``."""
        claim = read_claim(value) if value else None
        with self._lock:
            if claim is None:
                self.skipped += 1
            else:
                k = (claim.principal, claim.key)
                self.holders[k] = settle(self.holders.get(k), claim, self.limits)
                if claim.at_ms > self._newest + self.slack_ms:
                    self._newest = claim.at_ms
                    self._prune()
            self.positions[partition] = offset + 1

    def _prune(self) -> None:
        stale = self._newest - self.slack_ms
        for k in [k for k, h in self.holders.items() if expired(h, stale, self.limits)]:
            del self.holders[k]

    def passed(self, partition: int, offset: int) -> bool:
        """Return True once the record at ``partition``/``offset`` is folded."""
        return self.positions.get(partition, -1) > offset

    def holder(self, principal: str, key: str) -> Holder | None:
        """Return the holder of ``principal``'s ``key``, if any."""
        with self._lock:
            return self.holders.get((principal, key))


class KeyClaims:
    """One API process's claims: a producer of claims and a consumer thread folding the claims topic."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.claims_topic
        self.timeout_s = settings.produce_timeout_s
        ttl = timedelta(milliseconds=settings.dedup_ttl_ms)
        self.fold = ClaimFold(Limits(dedup_ttl=ttl))
        self.ready = threading.Event()  # the topic exists and the fold is assigned: claims may be appended
        self._producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 1,
                                   "socket.nagle.disable": True, **settings.kafka_config, "acks": "all",
                                   "enable.idempotence": True, "partitioner": "murmur2_random", "logger": log})
        self._consumer = KafkaConsumer({
            "bootstrap.servers": settings.kafka_bootstrap, "group.id": f"arbiter-api-claims-{uuid.uuid4()}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10,
            "socket.nagle.disable": True, **settings.kafka_config, "logger": log})
        self._running = True
        self._served = threading.Thread(target=self._serve_reports, name="arbiter-api-claims-reports", daemon=True)
        self._thread = threading.Thread(target=self._run, name="arbiter-api-claims", daemon=True)
        self._served.start()
        self._thread.start()

    def _assign(self) -> None:
        """Create the topic if missing and assign every partition from ``dedup_ttl`` + ``SLACK_MS`` ago."""
        ensure_claims_topic(self.settings)
        start_ms = int(time.time() * 1000) - self.settings.dedup_ttl_ms - SLACK_MS
        parts = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        starts = self._consumer.offsets_for_times([TopicPartition(self.topic, p, start_ms) for p in parts], timeout=10)
        # a partition with no record that recent starts at its end (-1 from offsets_for_times means "none")
        self._consumer.assign([TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else
                                              self._consumer.get_watermark_offsets(tp, timeout=10)[1])
                               for tp in starts])
        self.ready.set()

    def _run(self) -> None:
        # Started off the event loop and retried: the API starts (and answers keyed writes 503) while the broker is
        # away or a new topic's partitions have no leader yet. Any error later restarts the loop on the same consumer
        # (its positions kept): a dead fold would answer every later keyed write 503.
        while self._running:
            try:
                if not self.ready.is_set():
                    self._assign()
                self._loop()
            except Exception as e:  # noqa: BLE001 - anything, so the thread never dies
                if self.ready.is_set():
                    log.exception("claims: the fold failed; restarting it")
                else:
                    log.warning("claims: not assigned yet (%s); retrying", e)
                time.sleep(0.5)

    def _loop(self) -> None:
        while self._running:
            # prompt: a keyed write waits for its own claim here (consume alone would hold it up to the timeout)
            for msg in records(self._consumer, 0.05, "claims", prompt=True):
                self.fold.add(msg.partition(), msg.offset(), msg.value())

    def _serve_reports(self) -> None:
        while self._running:
            self._producer.poll(0.05)

    async def check(self, cmd: Command) -> None:
        """Claim ``cmd``'s key for its object; raise 422 IDEMPOTENCY_KEY_REUSED if another object holds it.

        503 BROKER_UNAVAILABLE when the claim is not acknowledged, or not folded, within ``produce_timeout_s``:
        nothing was produced but the claim, and a retry with the same key and object is settled the same way.
        """
        claim = claim_of(cmd)
        deadline = time.monotonic() + self.timeout_s
        while not self.ready.is_set():  # the fold is not assigned yet (just started, or the broker is away)
            if time.monotonic() > deadline:
                raise self._unavailable(claim, "the claims topic is not readable yet")
            await asyncio.sleep(WAIT_STEP_S * 10)
        partition, offset = await self._append(claim)
        while not self.fold.passed(partition, offset):
            if time.monotonic() > deadline:
                raise ApiError("the Idempotency-Key's claim was stored but not read back in time; retry with the "
                               "same key", code="BROKER_UNAVAILABLE", command_id=cmd.command_id,
                               headers={"Retry-After": str(self.settings.retry_after_s)})
            await asyncio.sleep(WAIT_STEP_S)
        holder = self.fold.holder(claim.principal, claim.key)
        if holder is None or won(holder, claim):
            return
        raise ApiError(f"the Idempotency-Key {claim.key[:64]!r} was already used for object {holder.object_id[:64]!r}; "
                       "a key names one request (use a new key for a new request)", code="IDEMPOTENCY_KEY_REUSED",
                       command_id=cmd.command_id)

    async def _append(self, claim: KeyClaim) -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, int]] = loop.create_future()

        def done(err: KafkaError | None, msg: Any) -> None:  # noqa: ANN401 - a confluent_kafka Message
            result = err if err is not None else (msg.partition(), msg.offset())
            loop.call_soon_threadsafe(_settle_future, fut, result)

        key, value = claim_record(claim)
        try:
            self._producer.produce(self.topic, value, key, on_delivery=done, timestamp=claim.at_ms)
        except (BufferError, KafkaException) as e:
            raise self._unavailable(claim, str(e)) from e
        try:
            return await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError as e:
            raise self._unavailable(claim, "no delivery report") from e
        except KafkaException as e:
            raise self._unavailable(claim, str(e)) from e

    def _unavailable(self, claim: KeyClaim, why: str) -> ApiError:
        return ApiError(f"the Idempotency-Key could not be claimed ({why}); retry with the same key",
                        code=BrokerUnavailable.code, command_id=claim.key,
                        headers={"Retry-After": str(self.settings.retry_after_s)})

    def close(self) -> None:
        """Stop the threads, flush the producer and close the consumer."""
        self._running = False
        self._thread.join(5)
        self._served.join(5)
        self._producer.flush(5)
        self._consumer.close()


def _settle_future(fut: asyncio.Future[tuple[int, int]], result: tuple[int, int] | KafkaError) -> None:
    if fut.done():
        return
    if isinstance(result, KafkaError):
        fut.set_exception(KafkaException(result))
    else:
        fut.set_result(result)


def ensure_claims_topic(settings: Settings) -> None:
    """Create the claims topic if missing, with as many partitions as the commands topic (an existing one is kept)."""
    from app.topics import admin, ensure_topics

    listed = admin(settings.kafka_bootstrap).list_topics(timeout=10).topics
    existing = listed.get(settings.claims_topic)
    partitions = len(existing.partitions) if existing is not None and existing.partitions else settings.partitions
    ensure_topics(settings, [settings.claims_topic], partitions)
