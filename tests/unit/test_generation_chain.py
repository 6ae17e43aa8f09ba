"""Which generation records count (issue 47, findings 2 and 3): every reader folds the generations topic alike.

The topic is a list here (``read_all`` and the producer stand in for the broker); what the broker does with the
same bytes is in ``tests/integration/test_generation_replay.py``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest

import app.rescale.generation as gen
from app.rescale.generation import GenerationWatch, current, first, history, publish, successor
from app.settings import Settings
from app.signing import signer_for
from app.validator.topic_io import Record
from commands import CreateObject
from schemas import codec
from schemas.generations import KEY

pytestmark = pytest.mark.unit


class FakeTopic:
    """A one-partition generations topic in memory."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def append(self, key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes], ...] = ()) -> Record:
        r = Record("cmds-generations", 0, len(self.records), key, value, headers)
        self.records.append(r)
        return r

    def copy(self, i: int) -> Record:
        """Append a byte-for-byte copy (key, value and headers) of record ``i``."""
        r = self.records[i]
        return self.append(r.key, r.value, r.headers)


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTopic]:
    t = FakeTopic()

    def read_all(settings: Settings, name: str, timeout: float = 30, since: int = 0) -> list[Record]:
        return [r for r in t.records if r.offset >= since]

    def produce(settings: Settings, records, name: str):  # noqa: ANN001, ANN202
        return [(0, t.append(k, v, tuple(h)).offset) for k, v, h, _ in records]

    monkeypatch.setattr(gen, "read_all", read_all)
    monkeypatch.setattr(gen, "produce_with_headers", produce)
    monkeypatch.setattr(gen, "ensure_generations_topic", lambda settings: None)
    yield t


S = Settings(topic_commands="cmds", partitions=4, var_dir="/tmp/x-var")  # type: ignore[arg-type]


def _rescale(s: Settings, partitions: int) -> None:
    """What ``arbiter rescale`` appends: the current generation paused, then its successor."""
    now = current(s)
    publish(s, replace(now, paused=True), "ops")
    publish(s, successor(s, now, partitions), "ops")


def test_a_copy_of_an_old_pause_record_does_not_pause_writes_again(topic: FakeTopic) -> None:
    _rescale(S, 6)
    assert (current(S).number, current(S).paused) == (1, False)
    topic.copy(0)  # generation 0, paused: genuine bytes, signature and all
    assert (current(S).number, current(S).paused) == (1, False)
    assert len(history(S)) == 2


def test_a_copy_of_an_older_switch_record_does_not_roll_the_pipeline_back(topic: FakeTopic) -> None:
    _rescale(S, 6)
    _rescale(S, 8)
    assert (current(S).number, current(S).topic) == (2, "cmds.g2")
    topic.copy(1)  # the switch to generation 1
    topic.copy(2)  # generation 1 paused
    assert (current(S).number, current(S).topic, current(S).paused) == (2, "cmds.g2", False)
    assert [g.number for g in history(S)] == [0, 1, 1, 2]


def test_a_copy_of_the_last_record_changes_nothing_and_the_next_rescale_still_counts(topic: FakeTopic) -> None:
    _rescale(S, 6)
    topic.copy(1)
    topic.copy(0)
    _rescale(S, 3)  # publish names the last record that counted, not the copies
    assert (current(S).number, current(S).partitions, current(S).paused) == (2, 3, False)


def test_a_users_command_keyed_arbiter_generation_is_skipped_not_raised(topic: FakeTopic) -> None:
    """Before the API reserved ``arbiter:`` ids it signed such a command: the fold skips it (it is no generation)."""
    _rescale(S, 6)
    cmd = CreateObject("c1", KEY.decode(), "mallory", datetime(2026, 1, 1, tzinfo=UTC), document="{}")
    value = codec.encode_command(cmd)
    topic.append(KEY, value, tuple(signer_for(S).headers(KEY, value)))
    topic.append(KEY, b'{"number": "x"}', tuple(signer_for(S).headers(KEY, b'{"number": "x"}')))
    assert (current(S).number, current(S).paused) == (1, False)


def test_a_generation_record_signed_as_a_command_does_not_count(topic: FakeTopic) -> None:
    """A record signed in the command domain is one a user could have had the API sign: no generation record."""
    _rescale(S, 6)
    head = "sha256:" + hashlib.sha256(topic.records[-1].value or b"").hexdigest()
    g2 = replace(successor(S, current(S), 9), previous=head)
    topic.append(KEY, g2.dumps(), tuple(signer_for(S).headers(KEY, g2.dumps())))
    assert current(S).number == 1


def test_an_unsigned_generation_record_never_counts_even_with_unsigned_commands_allowed(topic: FakeTopic) -> None:
    open_ = S.model_copy(update={"allow_unsigned_commands": True})
    g1 = successor(open_, first(open_), 6)
    topic.append(KEY, g1.dumps())
    assert current(open_) == first(open_)


def _padded(s: Settings, size: int) -> bytes:
    """A genuine-looking switch to generation 1 whose value is exactly ``size`` bytes (``by`` padded)."""
    g1 = replace(successor(s, first(s), 6), previous="", by="")
    pad = size - len(g1.dumps())
    return replace(g1, by="x" * pad).dumps()


@pytest.mark.parametrize(("size", "counts"), [(4096, True), (4097, False)])
def test_a_generation_record_over_4096_bytes_is_skipped_unread(topic: FakeTopic, size: int, counts: bool) -> None:
    from app.signing import GENERATION_DOMAIN

    value = _padded(S, size)
    assert len(value) == size and json.loads(value)["number"] == 1
    topic.append(KEY, value, tuple(signer_for(S, GENERATION_DOMAIN).headers(KEY, value)))
    assert (current(S).number == 1) is counts


class FakeConsumer:
    """Answers the watch's end-offset question with the fake topic's length; counts the questions."""

    def __init__(self, topic: FakeTopic) -> None:
        self.topic = topic
        self.calls = 0
        self.asked = threading.Condition()

    def get_watermark_offsets(self, tp, timeout: float = 0) -> tuple[int, int]:  # noqa: ANN001
        with self.asked:
            self.calls += 1
            self.asked.notify_all()
        return 0, len(self.topic.records)

    def close(self) -> None:
        pass


def _wait_ticks(consumer: FakeConsumer, n: int) -> None:
    """Return once the watch asked ``n`` more times: the tick before the last one asked after this call began."""
    with consumer.asked:
        start = consumer.calls
        assert consumer.asked.wait_for(lambda: consumer.calls >= start + n, timeout=60)


def _junk(topic: FakeTopic) -> None:
    """A user's command keyed ``arbiter:generation``, signed as the API signed every command before issue 47."""
    cmd = CreateObject("c1", KEY.decode(), "mallory", datetime(2026, 1, 1, tzinfo=UTC), document="{}")
    value = codec.encode_command(cmd)
    topic.append(KEY, value, tuple(signer_for(S).headers(KEY, value)))


def test_the_watch_skips_a_record_it_cannot_parse_and_sees_the_next_rescale(
        topic: FakeTopic, monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = FakeConsumer(topic)
    monkeypatch.setattr(gen, "Consumer", lambda conf: consumer)
    watch = GenerationWatch(S, interval_s=0.001)
    watch.start()
    try:
        _junk(topic)
        _wait_ticks(consumer, 3)
        _rescale(S, 6)
        _wait_ticks(consumer, 3)  # the tick that saw the new end is done once the next one asks
        assert watch.generation.number == 1
    finally:
        watch.stop()


def test_the_watch_outlives_an_error_no_one_foresaw_and_shows_it(
        topic: FakeTopic, monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = FakeConsumer(topic)
    monkeypatch.setattr(gen, "Consumer", lambda conf: consumer)
    watch = GenerationWatch(S, interval_s=0.001)
    real_follow = gen.follow
    broken: list[bool] = []

    def flaky(settings: Settings, folded):  # noqa: ANN001, ANN202 - the first read after the junk blows up
        if not broken:
            broken.append(True)
            raise RuntimeError("something no one foresaw")
        return real_follow(settings, folded)

    monkeypatch.setattr(gen, "follow", flaky)
    watch.start()
    try:
        _junk(topic)
        _wait_ticks(consumer, 3)
        _rescale(S, 6)
        _wait_ticks(consumer, 3)
        assert watch.alive and watch.failures == 1 and "something no one foresaw" in (watch.last_error or "")
        assert watch.generation.number == 1
    finally:
        watch.stop()


def test_records_signed_as_commands_before_the_upgrade_count_until_the_first_one_signed_as_a_generation(
        topic: FakeTopic) -> None:
    """An in-place upgrade keeps its history: the old records (signed as commands, no ``previous``) still count,
    each still has to advance, and none counts after the first record signed as a generation record."""
    legacy = signer_for(S)
    g0_paused, g1 = replace(first(S), paused=True), successor(S, first(S), 6)
    for g in (g0_paused, g1, g0_paused):  # the last one a replay: it does not advance
        topic.append(KEY, g.dumps(), tuple(legacy.headers(KEY, g.dumps())))
    assert [g.number for g in history(S)] == [0, 1] and not current(S).paused
    _rescale(S, 8)
    assert (current(S).number, current(S).paused) == (2, False)
    g2_paused = replace(current(S), paused=True, previous="")
    topic.append(KEY, g2_paused.dumps(), tuple(legacy.headers(KEY, g2_paused.dumps())))
    assert (current(S).number, current(S).paused) == (2, False)
