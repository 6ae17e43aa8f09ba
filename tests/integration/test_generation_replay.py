"""Copies of genuine generation records on the real generations topic (issue 47, findings 2 and 3): byte for byte,
headers and all as the broker hands them back, they pause nothing and roll nothing back, and a user's command keyed
``arbiter:generation`` neither crashes a reader nor stops a running API's watch."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from app.rescale.generation import GenerationWatch, current, history, publish, successor
from app.settings import Settings
from app.signing import signer_for
from app.validator.topic_io import produce_with_headers, read_all
from commands import CreateObject
from schemas import codec
from schemas.generations import KEY

pytestmark = pytest.mark.integration


def _rescale(s: Settings, partitions: int) -> None:
    """What ``arbiter rescale`` appends to the generations topic: the current generation paused, then the next."""
    now = current(s)
    publish(s, replace(now, paused=True), "ops")
    publish(s, successor(s, now, partitions), "ops")


def _copy(s: Settings, offset: int) -> None:
    """Append a byte-for-byte copy (key, value, headers) of the generations topic's record at ``offset``."""
    r = next(r for r in read_all(s, s.generations_topic) if r.offset == offset)
    produce_with_headers(s, [(r.key, r.value or b"", list(r.headers), None)], s.generations_topic)


def _until(check, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + 60  # a ceiling for a loaded machine, not a measured threshold
    while not check():
        assert time.monotonic() < deadline, f"{what} not seen within 60 s"
        time.sleep(0.1)


def test_copies_of_old_generation_records_pause_nothing_and_roll_nothing_back(settings: Settings) -> None:
    s = settings.model_copy(update={"state_backend": "rocksdb"})
    _rescale(s, 6)
    _rescale(s, 8)
    watch = GenerationWatch(s, interval_s=0.1).start()
    try:
        assert (watch.generation.number, watch.generation.paused) == (2, False)
        for offset in (0, 1, 2):  # generation 0 paused, the switch to 1, generation 1 paused
            _copy(s, offset)
        user = CreateObject("c1", KEY.decode(), "mallory", datetime(2026, 1, 1, tzinfo=UTC), document="{}")
        value = codec.encode_command(user)  # what the API signed for any user before issue 47
        produce_with_headers(s, [(KEY, value, signer_for(s).headers(KEY, value), None)], s.generations_topic)
        assert (current(s).number, current(s).paused, current(s).topic) == (2, False, f"{s.topic_commands}.g2")
        assert [g.number for g in history(s)] == [0, 1, 1, 2]
        _rescale(s, 3)  # the next real rescale still counts, for a fresh reader and for the running watch
        assert (current(s).number, current(s).partitions) == (3, 3)
        _until(lambda: watch.generation.number == 3, "generation 3 in the running watch")
        assert watch.alive and watch.failures == 0 and watch.chain.skipped == 4
    finally:
        watch.stop()
