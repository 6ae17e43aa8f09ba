"""Hottest keys per partition in bounded memory (Space-Saving, Metwally et al. 2005)."""

from __future__ import annotations

import threading


class SpaceSaving:
    """Approximate top-k counter: keeps ``capacity`` counters whatever the number of distinct keys.

    A new key evicts the smallest counter and inherits its count (so counts over-estimate by at most that
    minimum, reported as ``error``). Hot keys — the skew that quietly ruins keyed stream processing — are
    always retained: any key with more than N/capacity hits is guaranteed to be present.
    """

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._counts: dict[str, tuple[int, int]] = {}  # key -> (count, error)
        self.total = 0

    def add(self, key: str, n: int = 1) -> None:
        self.total += n
        if key in self._counts:
            c, e = self._counts[key]
            self._counts[key] = (c + n, e)
        elif len(self._counts) < self.capacity:
            self._counts[key] = (n, 0)
        else:
            victim = min(self._counts, key=lambda k: self._counts[k][0])
            floor = self._counts.pop(victim)[0]
            self._counts[key] = (floor + n, floor)

    def top(self, k: int = 5) -> list[tuple[str, int, int]]:
        """The ``k`` largest counters as (key, count, error), largest first, ties by key."""
        items = sorted(self._counts.items(), key=lambda kv: (-kv[1][0], kv[0]))[:k]
        return [(key, c, e) for key, (c, e) in items]


class HotKeys:
    """One Space-Saving counter per partition, safe to feed from a consumer thread and read from a request."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._by_partition: dict[int, SpaceSaving] = {}
        self._lock = threading.Lock()

    def add(self, partition: int, key: str) -> None:
        with self._lock:
            self._by_partition.setdefault(partition, SpaceSaving(self.capacity)).add(key)

    def top(self, k: int = 5) -> dict[int, list[tuple[str, int, int]]]:
        with self._lock:
            return {p: s.top(k) for p, s in sorted(self._by_partition.items())}
