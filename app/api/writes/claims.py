"""Idempotency-Key claims: one principal's key names one object, whichever API process or worker receives it.

Before a write with a client-chosen Idempotency-Key is produced, the API appends a claim (principal, key, object id,
issued_at) to the claims topic, keyed by the principal, so every claim of one principal's keys lands on one
partition, in one order, and signed in the key claims' own domain (``app.signing.KEY_CLAIM_DOMAIN``). Every API
process folds that topic from ``dedup_ttl`` (plus ``SLACK_MS``) ago (``app.api.writes.claim_fold``: only genuine
claims count, settled with the pure ``commands.claims.settle``), waits until its fold has passed its own claim, and
produces the command only if the key's holder is the command's object; otherwise the write is 422
IDEMPOTENCY_KEY_REUSED and nothing is produced, or 429 TOO_MANY_IDEMPOTENCY_KEYS when the principal already holds
``max_keys_per_principal`` keys. Two workers racing one key for two objects therefore agree: the first claim in the
log wins, the other is refused. A restarted process folds the same records again, so a key stays bound across
restarts and replicas. Keyed writes are 503 until the fold has read what the topic held when it started (and
whenever a claim is not stored and read back within ``produce_timeout_s``): never accepted unchecked.

Only the API claims: a producer writing to the commands topic directly gets the validator's per-object
deduplication only (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from app.api.problems import ApiError
from app.api.writes.claim_fold import SLACK_MS, ClaimFold, claim_record
from app.api.writes.outcomes import records
from app.errors import BrokerUnavailable
from app.settings import Settings
from app.signing import KEY_CLAIM_DOMAIN, control_checker_for, signature_of, signer_for
from commands import Command
from commands.claims import KeyClaim, claim_of, won
from commands.state import Limits

log = logging.getLogger(__name__)

#: How often the fold looks for its own claim while a write waits for it.
WAIT_STEP_S = 0.002
#: At most one warning per this many seconds about records that are no genuine claim (all are counted).
SKIP_LOG_INTERVAL_S = 10.0
#: How often the fold thread refreshes its lag (from the high watermarks its fetches saw).
LAG_INTERVAL_S = 1.0


class KeyClaims:
    """One API process's claims: a producer of claims and a consumer thread folding the claims topic."""

    def __init__(self, settings: Settings, on_skip: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.topic = settings.claims_topic
        self.timeout_s = settings.produce_timeout_s
        ttl = timedelta(milliseconds=settings.dedup_ttl_ms)
        self._signer = signer_for(settings, KEY_CLAIM_DOMAIN)
        self._count_skip = on_skip
        self._skips_unlogged = 0
        self._skip_logged_at = 0.0
        self.fold = ClaimFold(Limits(dedup_ttl=ttl), control_checker_for(settings, KEY_CLAIM_DOMAIN),
                              max_keys=settings.max_keys_per_principal, on_skip=self._skipped)
        self.assigned = threading.Event()  # the topic exists and the fold is assigned
        self.ready = threading.Event()  # ... and has folded what the topic held then: claims are settled
        self.lag: int | None = None  # records on the topic not folded yet (None: not known yet)
        self.restarts = 0
        self.last_error: str | None = None
        self._starts: dict[int, int] = {}  # partition -> the offset the fold was assigned at
        self._start_ends: dict[int, int] = {}  # partition -> its end then
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

    def _skipped(self, partition: int, offset: int, why: str) -> None:
        # Counted always; logged at most once per SKIP_LOG_INTERVAL_S (whoever can write the topic could flood it).
        if self._count_skip is not None:
            self._count_skip(self.topic)
        now = time.monotonic()
        if now - self._skip_logged_at < SKIP_LOG_INTERVAL_S:
            self._skips_unlogged += 1
            return
        log.warning("claims: %s[%d]@%d counts for nothing: %s (%d more skipped since the last warning)",
                    self.topic, partition, offset, why, self._skips_unlogged)
        self._skip_logged_at, self._skips_unlogged = now, 0

    def status(self) -> dict[str, Any]:
        """Return the reader's figures for /healthz and the status page."""
        position, holders, principals, skipped = self.fold.figures()
        return {"ready": self.ready.is_set(), "alive": self._thread.is_alive(), "lag": self.lag,
                "position": position, "holders": holders, "principals": principals, "skipped": skipped,
                "restarts": self.restarts, "error": self.last_error}

    def _assign(self) -> None:
        """Create the topic if missing and assign every partition from ``dedup_ttl`` + ``SLACK_MS`` ago."""
        ensure_claims_topic(self.settings)
        start_ms = int(time.time() * 1000) - self.settings.dedup_ttl_ms - SLACK_MS
        parts = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        starts = self._consumer.offsets_for_times([TopicPartition(self.topic, p, start_ms) for p in parts], timeout=10)
        ends = {tp.partition: self._consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in starts}
        # a partition with no record that recent starts at its end (-1 from offsets_for_times means "none")
        self._consumer.assign([TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else
                                              ends[tp.partition]) for tp in starts])
        self._starts = {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in starts}
        self._start_ends = ends
        self.assigned.set()

    def _position(self, partition: int) -> int:
        """Return the next offset the fold reads on ``partition`` (where it was assigned, before its first record)."""
        return self.fold.positions.get(partition, self._starts[partition])

    def _caught_up(self) -> bool:
        return all(self._position(p) >= end for p, end in self._start_ends.items())

    def _run(self) -> None:
        # Started off the event loop and retried: the API starts (and answers keyed writes 503) while the broker is
        # away or a new topic's partitions have no leader yet. Any error later restarts the loop on the same consumer
        # (its positions kept): a dead fold would answer every later keyed write 503.
        while self._running:
            try:
                if not self.assigned.is_set():
                    self._assign()
                self._loop()
            except Exception as e:  # noqa: BLE001 - anything, so the thread never dies
                if self.assigned.is_set():
                    self.restarts += 1
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.exception("claims: the fold failed; restarting it")
                else:
                    log.warning("claims: not assigned yet (%s); retrying", e)
                time.sleep(0.5)

    def _loop(self) -> None:
        lag_at = 0.0
        while self._running:
            # prompt: a keyed write waits for its own claim here (consume alone would hold it up to the timeout)
            for msg in records(self._consumer, 0.05, "claims", prompt=True):
                self.fold.add(msg.partition(), msg.offset(), msg.key(), msg.value(), signature_of(msg.headers() or ()))
            if not self.ready.is_set() and self._caught_up():
                self.ready.set()
            if time.monotonic() - lag_at >= LAG_INTERVAL_S:
                lag_at = time.monotonic()
                self.lag = self._lag()

    def _lag(self) -> int | None:
        """Return how many records the fold has still to read, by the high watermarks its last fetches saw."""
        total = 0
        for p in self._start_ends:
            high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)[1]
            if high < 0:
                return self.lag  # not known since the last fetch: keep the last figure
            total += max(0, high - self._position(p))
        return total

    def _serve_reports(self) -> None:
        while self._running:
            self._producer.poll(0.05)

    async def check(self, cmd: Command) -> None:
        """Claim ``cmd``'s key for its object; raise 422 IDEMPOTENCY_KEY_REUSED if another object holds it, 429
        TOO_MANY_IDEMPOTENCY_KEYS if its principal holds ``max_keys_per_principal`` other keys.

        503 BROKER_UNAVAILABLE when the fold has not read the topic up to where it stood at the start, or the claim
        is not acknowledged, or not folded, within ``produce_timeout_s``: nothing was produced but (maybe) the claim,
        and a retry with the same key and object is settled the same way.
        """
        claim = claim_of(cmd)
        deadline = time.monotonic() + self.timeout_s
        while not self.ready.is_set():  # not caught up yet (just started, or the broker is away)
            if time.monotonic() > deadline:
                raise self._unavailable(claim, "the claims reader has not caught up with the claims topic yet")
            await asyncio.sleep(WAIT_STEP_S * 10)
        partition, offset = await self._append(claim)
        while not self.fold.passed(partition, offset):
            if time.monotonic() > deadline:
                raise ApiError("the Idempotency-Key's claim was stored but not read back in time; retry with the "
                               "same key", code="BROKER_UNAVAILABLE", command_id=cmd.command_id,
                               headers={"Retry-After": str(self.settings.retry_after_s)})
            await asyncio.sleep(WAIT_STEP_S)
        holder = self.fold.holder(claim.principal, claim.key)
        if won(holder, claim):
            return
        if holder is None:  # the principal holds its most keys: this claim took none
            wait_s = -(-self.fold.free_in_ms(claim.principal, claim.at_ms) // 1000)
            raise ApiError(f"the principal holds {self.settings.max_keys_per_principal} Idempotency-Keys claimed "
                           f"within the last {self.settings.dedup_ttl_ms // 1000} s (ARBITER_MAX_KEYS_PER_PRINCIPAL); "
                           "nothing was produced: retry after Retry-After seconds, or write without a key",
                           code="TOO_MANY_IDEMPOTENCY_KEYS", command_id=cmd.command_id,
                           headers={"Retry-After": str(max(1, wait_s))})
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
            self._producer.produce(self.topic, value, key, on_delivery=done, timestamp=claim.at_ms,
                                   headers=self._signer.headers(key, value))
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


def claims_retention_ms(settings: Settings) -> int:
    """Return the claims topic's ``retention.ms``: ``ARBITER_RETENTION_MS``, but never less than the fold reads back
    (``dedup_ttl`` + ``SLACK_MS``) and another ``SLACK_MS``, so a restarted process finds every claim that still holds."""
    return max(settings.retention_ms, settings.dedup_ttl_ms + 2 * SLACK_MS)


def ensure_claims_topic(settings: Settings) -> None:
    """Create the claims topic if missing, with as many partitions as the commands topic (an existing one is kept)."""
    from app.topics import admin, ensure_topics

    listed = admin(settings.kafka_bootstrap).list_topics(timeout=10).topics
    existing = listed.get(settings.claims_topic)
    partitions = len(existing.partitions) if existing is not None and existing.partitions else settings.partitions
    ensure_topics(settings, [settings.claims_topic], partitions,
                  config={"retention.ms": str(claims_retention_ms(settings))})
