"""The validator's hand-over decisions (``app.rescale.handover``): when it moves, to what, and what it warms first."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from app.rescale.generation import first, overlay, successor
from app.rescale.handover import Handover
from app.rescale.steps import Plan, write_plan
from app.settings import Settings
from schemas.generations import Generation

pytestmark = pytest.mark.unit


class FakeWatch:
    """What the hand-over reads of a ``GenerationWatch``: the generation it last folded (set by the test)."""

    def __init__(self, generation: Generation) -> None:
        self.generation = generation

    def start(self) -> None: ...

    def stop(self) -> None: ...


def _handover(tmp_path: Path) -> tuple[Handover, FakeWatch, list[Settings], threading.Event]:
    s = Settings(topic_commands="cmds", partitions=4, var_dir=tmp_path / "var",  # type: ignore[call-arg]
                 checkpoint_location=str(tmp_path / "cp"))
    warmed: list[Settings] = []
    seen = threading.Event()

    def warm(settings: Settings) -> None:
        warmed.append(settings)
        seen.set()

    watch = FakeWatch(first(s))
    return Handover(s, warm=warm, watch=watch), watch, warmed, seen  # type: ignore[arg-type]


def _tick(h: Handover, watch: FakeWatch, now: Generation) -> None:
    watch.generation = now
    h._changed(now)


def test_a_pause_warms_the_planned_generation_and_only_a_new_number_hands_over(tmp_path: Path) -> None:
    h, watch, warmed, seen = _handover(tmp_path)
    g0 = first(h.base)
    g1 = successor(h.base, g0, 6)
    write_plan(h.base, Plan(g0, g1, "pause"))
    assert h.settings() is h.base  # generation 0: the settings as configured
    _tick(h, watch, replace(g0, paused=True))
    assert seen.wait(5)
    assert [(w.topic_commands, w.partitions, w.checkpoint_location) for w in warmed] == \
        [("cmds.g1", 6, g1.checkpoint)]
    assert not h.switched.is_set()  # paused: the query goes on, it must drain its topic
    _tick(h, watch, g1)
    assert h.switched.is_set()
    seen.clear()
    moved = h.next_settings()
    assert moved == overlay(h.base, g1) and not h.switched.is_set()
    assert seen.wait(5) and warmed[-1] == moved  # warmed again at the switch (cheap once its servers run)
    _tick(h, watch, replace(g1, paused=True))  # the next rescale pauses the generation now running: no hand-over
    assert not h.switched.is_set()
    _tick(h, watch, successor(h.base, g1, 2))
    assert h.switched.is_set() and h.next_settings().topic_commands == "cmds.g2"


def test_a_failing_warm_changes_nothing(tmp_path: Path) -> None:
    h, watch, _, _ = _handover(tmp_path)
    failed = threading.Event()

    def warm(_: Settings) -> None:
        failed.set()
        raise OSError("no room for a socket")

    h.warm = warm
    g1 = successor(h.base, first(h.base), 6)
    _tick(h, watch, g1)
    assert h.next_settings().topic_commands == "cmds.g1"
    assert failed.wait(5)
    time.sleep(0.05)
    assert not h.switched.is_set()
