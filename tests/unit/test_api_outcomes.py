"""The outcome cache: waiters resolve by command id and attempt, the cache stays bounded."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pytest

from app.api.outcomes import OutcomeCache
from commands import Event, EventType, ReasonCode, Rejection

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def event(cid: str, version: int = 1, at: datetime = T0) -> Event:
    return Event(f"e-{cid}", EventType.CREATED, "o", version, cid, "alice", at, "alice", document="{}")


def rejection(cid: str, at: datetime, reason: ReasonCode = ReasonCode.VERSION_CONFLICT) -> Rejection:
    return Rejection(f"r-{cid}-{at}", reason, "no", cid, "o", "alice", at, 3)


def test_a_waiter_is_woken_from_another_thread() -> None:
    cache = OutcomeCache(10)

    async def scenario() -> Event | Rejection | None:
        waiting = asyncio.ensure_future(cache.wait("c1", T0, timeout=5))
        await asyncio.sleep(0.01)
        threading.Thread(target=cache.offer, args=(event("c1"),)).start()
        return await waiting

    assert asyncio.run(scenario()) == event("c1")


def test_an_outcome_seen_before_waiting_answers_at_once_and_timeouts_give_none() -> None:
    cache = OutcomeCache(10)
    cache.offer(event("c1"))
    assert asyncio.run(cache.wait("c1", T0 + timedelta(seconds=9), 0.01)) == event("c1")  # a retry of an accepted one
    assert asyncio.run(cache.wait("c2", T0, 0.01)) is None
    assert not cache._waiters  # timed-out waiters are removed


def test_an_earlier_attempts_rejection_does_not_answer_a_retry() -> None:
    cache = OutcomeCache(10)
    first = rejection("c1", T0)
    cache.offer(first)
    assert asyncio.run(cache.wait("c1", T0, 0.01)) == first
    assert asyncio.run(cache.wait("c1", T0 + timedelta(seconds=1), 0.01)) is None
    assert cache.lookup("c1") == first
    cache.offer(event("c1", at=T0 + timedelta(seconds=1)))
    assert cache.lookup("c1") == event("c1", at=T0 + timedelta(seconds=1))  # the event wins over the rejection


def test_cache_is_bounded_oldest_first_and_counts_outcomes() -> None:
    seen: list[Event | Rejection] = []
    cache = OutcomeCache(3, seen.append)
    for i in range(5):
        cache.offer(event(f"c{i}"))
    assert len(cache) == 3
    assert cache.lookup("c0") is None and cache.lookup("c4") is not None
    assert len(seen) == 5
