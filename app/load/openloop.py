"""Open-loop load: request i leaves at t0 + i/rate whatever earlier requests are doing; latency counts from then.

A closed loop (N workers, each waiting for its answer) slows down with the system under test and reports a rate it
did not send and latencies that leave out the wait for a free worker. Here the schedule is fixed in advance, every
request runs as its own task, and a request's latency is its answer time minus its *scheduled* send time, so
queueing anywhere — in this client's event loop, its connection pool, the server — is part of the figure.
``drive`` is shared by ``arbiter load --via api`` and ``bench/pipeline``; the clock is injectable for tests.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Answer:
    """How one request ended: ``kind`` names it ("201", "timeout", ...); ``ok`` is False for an error.

    ``outcome`` is the decision if the answer carries one ("accepted", a reason code, "queued"); ``key`` lets a
    caller join the request with what it sees elsewhere (a command id and its decision on a topic).
    """

    kind: str
    ok: bool
    outcome: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    """One request: when it was due, when it actually left, when its answer (or error) came back."""

    index: int
    scheduled: float
    sent: float
    done: float
    answer: Answer

    @property
    def latency(self) -> float:
        """Seconds from the scheduled send to the answer: includes any wait before the request actually left."""
        return self.done - self.scheduled

    @property
    def send_lag(self) -> float:
        """Seconds the request left after its scheduled time: the client's own backlog."""
        return self.sent - self.scheduled


class Clock(Protocol):
    """Where ``drive`` reads the time and how it sleeps (real time, or a fake in tests)."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """``time.monotonic`` (CLOCK_MONOTONIC: one clock for every process on a Linux machine) and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


REAL_CLOCK = MonotonicClock()
Send = Callable[[int], Awaitable[Answer]]


async def drive(send: Send, rate: float, indexes: Iterable[int], *, t0: float | None = None, clock: Clock = REAL_CLOCK,
                on_done: Callable[[Sample], None] | None = None) -> list[Sample]:
    """Call ``send(i)`` at ``t0 + i / rate`` for each ``i`` of ``indexes`` (ascending), each in its own task.

    Never waits for an answer before the next send. A request that is already overdue (the loop fell behind)
    leaves at once and keeps its scheduled time. ``send`` should turn failures into an error ``Answer``; an
    exception it raises is recorded as one. Returns the samples ordered by index; on cancellation the
    requests in flight are cancelled too.
    """
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    start = clock.now() if t0 is None else t0
    samples: list[Sample] = []
    tasks: set[asyncio.Task[None]] = set()

    async def one(i: int, due: float) -> None:
        sent = clock.now()
        try:
            answer = await send(i)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a request that blew up is an error answer, not the end of the run
            answer = Answer(f"exception {type(e).__name__}", ok=False)
        sample = Sample(i, due, sent, clock.now(), answer)
        samples.append(sample)
        if on_done is not None:
            on_done(sample)

    try:
        for i in indexes:
            due = start + i / rate
            now = clock.now()
            if due > now:
                await clock.sleep(due - now)
            else:
                await asyncio.sleep(0)  # behind schedule: still let the requests already due start
            task = asyncio.ensure_future(one(i, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.gather(*list(tasks))
    finally:
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
    samples.sort(key=lambda s: s.index)
    return samples


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``values``: the smallest value with >= q of them at or below."""
    if not values:
        return math.nan
    xs = sorted(values)
    return xs[max(0, math.ceil(q * len(xs)) - 1)]


@dataclass
class Summary:
    """What a run of ``drive`` achieved, against what was offered."""

    offered: float
    requests: int
    ok: int
    sent_per_s: float
    completed_per_s: float
    span_s: float
    latency: dict[str, float]
    send_lag: dict[str, float]
    kinds: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    peak_in_flight: int = 0


QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "max": 1.0}


def summarize(samples: Sequence[Sample], rate: float, t0: float) -> Summary:
    """Rates and latency quantiles of ``samples`` driven at ``rate`` from ``t0``.

    sent/s is requests over t0 to the last send; completed/s is requests answered without error over t0 to the
    last of those answers: what a client of this system got, including the time the last answers took (so it
    reads up to max latency / duration low on a short run). Both spans get one schedule interval added, so a
    system that answers at once shows exactly the offered rate. A system that falls behind shows here even when
    every request left on time. Latency quantiles are over every request, an error counting with the time it
    took to fail.
    """
    ok = [s for s in samples if s.answer.ok]
    last_sent = max((s.sent for s in samples), default=t0)
    last_ok = max((s.done for s in ok), default=t0)
    latencies = [s.latency for s in samples]
    lags = [s.send_lag for s in samples]
    return Summary(
        offered=rate,
        requests=len(samples),
        ok=len(ok),
        sent_per_s=len(samples) / (last_sent - t0 + 1 / rate) if samples else 0.0,
        completed_per_s=len(ok) / (last_ok - t0 + 1 / rate) if ok else 0.0,
        span_s=max((s.done for s in samples), default=t0) - t0,
        latency={k: percentile(latencies, q) for k, q in QUANTILES.items()},
        send_lag={k: percentile(lags, q) for k, q in QUANTILES.items()},
        kinds=Counter(s.answer.kind for s in samples),
        errors=Counter(s.answer.kind for s in samples if not s.answer.ok),
        outcomes=Counter(s.answer.outcome for s in samples if s.answer.outcome is not None),
        peak_in_flight=peak_in_flight(samples),
    )


def peak_in_flight(samples: Sequence[Sample]) -> int:
    """The most requests sent and not yet answered at any one time."""
    edges = sorted([(s.sent, 1) for s in samples] + [(s.done, -1) for s in samples], key=lambda e: (e[0], e[1]))
    peak = level = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak
