"""The status page's history ring and its latency quantiles."""

from __future__ import annotations

import pytest

from app.status.history import History, percentile

pytestmark = pytest.mark.unit


def test_nearest_rank_quantiles() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert percentile(samples, 0.5) == 50.0 and percentile(samples, 0.99) == 99.0 and percentile(samples, 1.0) == 100.0
    assert percentile([7.0], 0.99) == 7.0 and percentile([], 0.5) is None


def test_the_ring_keeps_the_newest_points_as_columns() -> None:
    h = History(points=3)
    for t in range(5):
        h.add({"t": t, "a": t * 10} | ({"lag_0": 1} if t == 4 else {}))
    assert h.columns() == {"t": [2, 3, 4], "a": [20, 30, 40], "lag_0": [None, None, 1]}
