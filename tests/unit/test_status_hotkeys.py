"""Space-Saving keeps the truly hot keys and bounds its memory."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.status.hotkeys import HotKeys, SpaceSaving

pytestmark = pytest.mark.unit


def test_exact_while_under_capacity() -> None:
    s = SpaceSaving(capacity=8)
    for key in "aaabbc":
        s.add(key)
    assert s.top(3) == [("a", 3, 0), ("b", 2, 0), ("c", 1, 0)]


def test_skewed_stream_finds_the_hot_key_with_bounded_memory() -> None:
    rng = random.Random(7)
    s = SpaceSaving(capacity=16)
    for i in range(20_000):
        s.add("hot" if i % 5 == 0 else f"cold-{rng.randrange(5000)}")
    assert s.top(1)[0][0] == "hot"
    assert len(s._counts) == 16


@given(st.lists(st.sampled_from([f"k{i}" for i in range(30)]), max_size=400))
def test_guarantees_of_space_saving(keys: list[str]) -> None:
    s = SpaceSaving(capacity=10)
    for k in keys:
        s.add(k)
    truth = Counter(keys)
    for key, count, error in s.top(10):
        assert count - error <= truth[key] <= count  # never under-counts; over-count bounded by error
    for key, n in truth.items():
        if n > len(keys) / 10:
            assert key in {k for k, _, _ in s.top(10)}


def test_per_partition() -> None:
    h = HotKeys(capacity=4)
    h.add(0, "x")
    h.add(0, "x")
    h.add(3, "y")
    assert h.top(1) == {0: [("x", 2, 0)], 3: [("y", 1, 0)]}
