"""The outcome cache: keyed by (principal, command id), waiters resolved by their own attempt only, bounded in
bytes (measured, not just counted) and in waiters, never holding a document."""

from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
from datetime import UTC, datetime, timedelta

import pytest

from app.api.writes.outcomes import OutcomeCache
from app.api.writes.summary import OutcomeSummary
from commands import Event, EventType, ReasonCode, Rejection
from schemas import codec

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def cache(**kw: int) -> OutcomeCache:
    return OutcomeCache(**{"max_bytes": 1 << 30, "max_entries": 1000, "max_waiters": 100, **kw})


def event(cid: str, version: int = 1, at: datetime = T0, principal: str = "alice", document: str = "{}") -> Event:
    return Event(f"e-{cid}", EventType.CREATED, "o", version, cid, principal, at, principal, document=document)


def rejection(cid: str, at: datetime, reason: ReasonCode = ReasonCode.VERSION_CONFLICT, principal: str = "alice",
              **kw: object) -> Rejection:
    return Rejection(f"r-{cid}-{at}", reason, "no", cid, "o", principal, at, 3, **kw)  # type: ignore[arg-type]


def test_a_waiter_is_woken_from_another_thread_with_a_summary() -> None:
    c = cache()

    async def scenario() -> OutcomeSummary | None:
        waiting = asyncio.ensure_future(c.wait("alice", "c1", T0, timeout=5))
        await asyncio.sleep(0.01)
        threading.Thread(target=c.offer, args=(event("c1", document='{"big": "x"}'),)).start()
        return await waiting

    got = asyncio.run(scenario())
    assert got == OutcomeSummary("accepted", "c1", "alice", "o", 1, T0, event="CREATED")
    assert not c._waiters


def test_keys_are_per_principal() -> None:
    """Bob's command "k" is not Alice's: her outcome neither answers his waiter nor his lookup."""
    c = cache()
    c.offer(event("k", principal="alice"))
    assert c.lookup("alice", "k") is not None
    assert c.lookup("bob", "k") is None
    assert asyncio.run(c.wait("bob", "k", T0, 0.05)) is None
    c.offer(rejection("k", T0, principal="bob"))
    assert c.lookup("bob", "k").reason == "VERSION_CONFLICT"  # type: ignore[union-attr]
    assert c.lookup("alice", "k").kind == "accepted"  # type: ignore[union-attr]


def test_only_the_attempts_own_decision_answers_it() -> None:
    """A retry (later issued_at) is not answered by the first attempt's event: the key may have been reused for
    another request (IDEMPOTENCY_KEY_REUSED), so only the validator's decision of *this* attempt answers."""
    c = cache()
    c.offer(event("c1"))
    assert asyncio.run(c.wait("alice", "c1", T0, 0.01)).kind == "accepted"  # type: ignore[union-attr]
    retry = T0 + timedelta(seconds=9)
    assert asyncio.run(c.wait("alice", "c1", retry, 0.01)) is None
    c.offer(rejection("c1", retry, ReasonCode.IDEMPOTENCY_KEY_REUSED))
    answer = asyncio.run(c.wait("alice", "c1", retry, 0.01))
    assert answer is not None and answer.reason == "IDEMPOTENCY_KEY_REUSED"
    assert c.lookup("alice", "c1").kind == "accepted"  # type: ignore[union-attr]  # the key's command was accepted
    dup_at = T0 + timedelta(seconds=10)
    c.offer(rejection("c1", dup_at, ReasonCode.DUPLICATE, original_outcome="ACCEPTED", original_version=1))
    dup = asyncio.run(c.wait("alice", "c1", dup_at, 0.01))
    assert dup is not None and (dup.reason, dup.original_outcome, dup.original_version) == ("DUPLICATE", "ACCEPTED", 1)
    assert not c._waiters  # timed-out waiters are removed


def test_an_earlier_attempts_rejection_does_not_answer_a_retry() -> None:
    c = cache()
    c.offer(rejection("c1", T0))
    assert asyncio.run(c.wait("alice", "c1", T0 + timedelta(seconds=1), 0.01)) is None
    c.offer(event("c1", at=T0 + timedelta(seconds=1)))
    assert c.lookup("alice", "c1").kind == "accepted"  # type: ignore[union-attr]  # the event wins


def test_count_bound_oldest_first_and_every_outcome_is_counted() -> None:
    seen: list[Event | Rejection] = []
    c = OutcomeCache(max_bytes=1 << 30, max_entries=3, max_waiters=1, on_outcome=seen.append)
    for i in range(5):
        c.offer(event(f"c{i}"))
    assert len(c) == 3
    assert c.lookup("alice", "c0") is None and c.lookup("alice", "c4") is not None
    assert len(seen) == 5


def _outcome(i: int) -> Event | Rejection:
    cid, oid, who, at = f"cmd-{i:08d}-{'x' * 24}", f"obj-{i:08d}", f"user-{i % 500}", T0 + timedelta(microseconds=i)
    if i % 2:
        return Event(f"e{i}", EventType.CREATED, oid, 1, cid, who, at, who, document='{"d": "' + "y" * 2000 + '"}')
    return Rejection(f"r{i}", ReasonCode.VERSION_CONFLICT, "m" * 2000, cid, oid, who, at, 3)


def test_memory_is_bounded_in_bytes_as_measured() -> None:
    """Fill a 1 MiB cache with 10x more than fits, as the consumer does (decoded records): the heap it keeps is
    under the bound, the estimate is not below the truth, and nothing of the 2 kB documents or messages stays."""
    bound = 1024 * 1024
    records = [codec.encode_outcome(_outcome(i)) for i in range(12_000)]
    c = cache(max_bytes=bound, max_entries=10**9)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for raw in records:
            c.offer(codec.decode_outcome(raw))
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert c.nbytes <= bound
    assert 500 < len(c) < 2000, len(c)
    assert kept <= bound, f"the cache keeps {kept} bytes, over its bound of {bound}"
    assert kept <= c.nbytes * 1.02, f"the estimate ({c.nbytes}) is below the measured heap ({kept})"


def test_ids_longer_than_any_api_request_are_not_cached() -> None:
    c = cache()
    c.offer(event("k" * 10_000))
    assert len(c) == 0 and c.nbytes == 0


def test_waiter_slots_are_capped() -> None:
    c = cache(max_waiters=2)
    assert c.reserve_waiter("alice") and c.reserve_waiter("bob")
    assert not c.reserve_waiter("carol")
    assert c.waiting == 2
    c.release_waiter("alice")
    assert c.reserve_waiter("carol")
