"""Per-principal token buckets: each principal's writes (and reads) at a rate with a burst, refusals told when to return.

A bucket holds up to ``burst`` tokens and refills at ``rate`` tokens a second; a request costs one token per
command (a batch of N costs N). A refused request takes nothing and is told how long until its cost is there:
``429 RATE_LIMITED`` with ``Retry-After`` and the ``RateLimit-Policy`` / ``RateLimit`` fields of
draft-ietf-httpapi-ratelimit-headers-11 (``headers``).

Cheap and bounded: one dict lookup and some arithmetic per request, no lock (the event loop runs one request at a
time). The dict is kept in least-recently-used order; each call drops up to two of the oldest buckets that would
have refilled by now (a full bucket is the same as none), and beyond ``max_principals`` the least recently used
is dropped whatever it holds, so idle principals cost nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from app.api.problems import ApiError

#: Buckets of idle principals looked at (and dropped if full) per call: keeps the dict at the active principals.
_SWEEP = 2


class TokenBuckets:
    """One bucket per principal under the policy ``name``; ``rate`` <= 0 means no limit."""

    def __init__(self, name: str, *, rate: float, burst: int, max_principals: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.rate = rate
        self.burst = burst
        self.max_principals = max_principals
        self._clock = clock
        # principal -> [tokens, when]; insertion order is least recently used first
        self._buckets: dict[str, list[float]] = {}

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, principal: str, cost: int = 1) -> float:
        """Take ``cost`` tokens of ``principal``'s bucket: 0.0 if taken, else the seconds until they are there."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        bucket = self._buckets.pop(principal, None)
        if bucket is None:
            bucket = [float(self.burst), now]
        else:
            bucket[0] = min(float(self.burst), bucket[0] + (now - bucket[1]) * self.rate)
            bucket[1] = now
        wait = 0.0
        if bucket[0] >= cost:
            bucket[0] -= cost
        else:
            wait = (cost - bucket[0]) / self.rate
        self._buckets[principal] = bucket  # the most recently used: last
        self._sweep(now)
        return wait

    def wait_for(self, principal: str, cost: int = 1) -> float:
        """Seconds until ``principal`` has ``cost`` tokens (0.0: it has them now); nothing is taken."""
        if self.rate <= 0:
            return 0.0
        bucket = self._buckets.get(principal)
        if bucket is None:
            return 0.0 if self.burst >= cost else (cost - self.burst) / self.rate
        tokens = min(float(self.burst), bucket[0] + (self._clock() - bucket[1]) * self.rate)
        return 0.0 if tokens >= cost else (cost - tokens) / self.rate

    def remaining(self, principal: str) -> int:
        """Whole tokens ``principal`` has now (``burst`` for a principal without a bucket)."""
        bucket = self._buckets.get(principal)
        if bucket is None:
            return self.burst
        return int(min(float(self.burst), bucket[0] + (self._clock() - bucket[1]) * self.rate))

    def _sweep(self, now: float) -> None:
        buckets = self._buckets
        for _ in range(_SWEEP):
            if len(buckets) <= 1:
                return
            oldest = next(iter(buckets))
            tokens, when = buckets[oldest]
            if len(buckets) > self.max_principals or tokens + (now - when) * self.rate >= self.burst:
                del buckets[oldest]
            else:
                return

    def window_s(self) -> int:
        """Seconds an empty bucket takes to fill: the policy's window ``w`` (at least 1)."""
        return max(1, math.ceil(self.burst / self.rate)) if self.rate > 0 else 1

    def headers(self, principal: str, wait: float) -> dict[str, str]:
        """``Retry-After`` and the draft-11 RateLimit fields of a refusal that must wait ``wait`` seconds."""
        retry_after = max(1, math.ceil(wait))
        return {"Retry-After": str(retry_after),
                "RateLimit-Policy": f'"{self.name}";q={self.burst};w={self.window_s()}',
                "RateLimit": f'"{self.name}";r={self.remaining(principal)};t={retry_after}'}


class Quotas:
    """The API process's per-principal buckets: ``writes`` (commands) and ``reads`` (GETs of objects and outcomes)."""

    def __init__(self, *, write_rate: float, write_burst: int, read_rate: float, read_burst: int,
                 max_principals: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.writes = TokenBuckets("writes", rate=write_rate, burst=write_burst, max_principals=max_principals,
                                   clock=clock)
        self.reads = TokenBuckets("reads", rate=read_rate, burst=read_burst, max_principals=max_principals,
                                  clock=clock)


def refusal(buckets: TokenBuckets, principal: str, wait: float, cost: int = 1) -> ApiError:
    """The ``429 RATE_LIMITED`` problem of a request of ``cost`` tokens refused by ``buckets``."""
    return ApiError(f"{principal!r} is over its {buckets.name} rate ({buckets.rate:g}/s, burst {buckets.burst}); "
                    f"this request costs {cost}: retry after Retry-After seconds", code="RATE_LIMITED",
                    headers=buckets.headers(principal, wait), **{"violated-policies": [buckets.name]})
