"""When and how long to wait before sending a request again: exponential backoff with jitter, ``Retry-After`` first.

Pure: no I/O, no clock of its own (the caller passes the time for an HTTP-date ``Retry-After``), so the policy is
tested without a server.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Return the seconds a ``Retry-After`` value asks for (delta-seconds or an HTTP-date), None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a request that may succeed later is sent again (same Idempotency-Key, so a write is applied once).

    ``attempts`` counts the first try. A server's ``Retry-After`` is honoured as given (plus up to ``jitter`` of
    it), unless it is over ``max_retry_after_s``: then the error is raised at once (``VIEW_STALE`` asks for an
    hour). Without ``Retry-After`` the wait is ``base_s * 2**n`` capped at ``max_backoff_s``, "full jitter".
    """

    attempts: int = 8
    base_s: float = 0.2
    max_backoff_s: float = 10.0
    max_retry_after_s: float = 60.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, retry: int, retry_after: float | None) -> float | None:
        """Return the seconds to wait before retry number ``retry`` (1 = the first retry), or None to give up."""
        if retry >= self.attempts:
            return None
        if retry_after is not None:
            if retry_after > self.max_retry_after_s:
                return None
            return retry_after * (1.0 + self.jitter * self.rng.random())
        return self.rng.uniform(0.0, min(self.max_backoff_s, self.base_s * 2 ** (retry - 1)))


#: Retries nothing: for callers that want every failure at once.
NO_RETRY = RetryPolicy(attempts=1)
