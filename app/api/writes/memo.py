"""A blocking computation's result, shared by every concurrent caller and recomputed at most once per interval.

For answers that many clients poll (``/status.json``, ``/healthz``): however many requests arrive, the work
(broker metadata, watermarks, files) runs at most once per ``interval`` seconds, in a worker thread, and the
requests that arrive meanwhile wait for that one run instead of starting their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Memo(Generic[T]):
    """``await memo.get()`` returns ``compute()``'s result, at most ``interval`` seconds old; one run at a time."""

    def __init__(self, compute: Callable[[], T], interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._compute = compute
        self.interval = interval
        self._clock = clock
        self._value: tuple[float, T] | None = None
        self._lock: asyncio.Lock | None = None
        self.runs = 0
        self._finished = 0  # runs completed: a caller that waited for one takes its result, however long it took

    def _fresh(self) -> T | None:
        if self._value is not None and self._clock() - self._value[0] < self.interval:
            return self._value[1]
        return None

    async def get(self) -> T:
        """Return the shared result, computing it first if it is older than ``interval``."""
        value = self._fresh()
        if value is not None:
            return value
        if self._lock is None:
            self._lock = asyncio.Lock()
        finished = self._finished
        async with self._lock:
            # Computed by the run this caller waited for: its result even if that run took longer than the
            # interval (else, when one run is that slow, every queued caller would run it again, one after another).
            if self._finished != finished and self._value is not None:
                return self._value[1]
            value = self._fresh()
            if value is not None:
                return value
            started = self._clock()
            self.runs += 1
            value = await asyncio.to_thread(self._compute)
            self._value = (started, value)
            self._finished += 1
            return value
