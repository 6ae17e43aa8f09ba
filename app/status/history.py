"""The status page's recent past: one point a second for the last 15 minutes, kept in bounded memory."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

WINDOW_S = 15 * 60
MAX_LAG_SERIES = 16  # more partitions than this: the lag chart shows their total only


def percentile(samples: list[float], q: float) -> float | None:
    """Return the ``q`` quantile (0..1, nearest rank) of ``samples``, or None when there are none."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class History:
    """A ring of points ``{"t": unix seconds, name: value | None, ...}``; ``columns()`` gives them series by series."""

    def __init__(self, points: int = WINDOW_S) -> None:
        self._points: deque[dict[str, Any]] = deque(maxlen=points)

    def add(self, point: dict[str, Any]) -> None:
        self._points.append(point)

    def columns(self) -> dict[str, list[Any]]:
        """Return ``{"t": [...], name: [...]}`` over every point (None where a point lacks the name)."""
        names: dict[str, None] = {}
        for p in self._points:
            names.update(dict.fromkeys(p))
        return {n: [p.get(n) for p in self._points] for n in names}
