"""What reads the commands topic follows the generations (issue 42): the archive's pattern, verify's fold across
generations, the status page's lag and hot keys, and the records written to a closed generation."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.archive.columns import Decoder
from app.archive.query import pattern
from app.rescale.errors import RulesDiverged
from app.rescale.generation import first, overlay, successor
from app.rescale.late import late_outputs
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.validator.fold import limits_for
from app.validator.murmur2 import partition_for
from app.validator.outputs import outcome_record
from app.verify.generations import CommandTopics
from app.verify.refold import Row, compare, refold
from app.verify.timeline import RulesTimeline, build_timeline
from commands import CreateObject, Event, ReasonCode, UpdateObject, decide
from schemas import codec, parked
from schemas.generations import Generation, generation_of, generation_pattern
from tests.unit.record_strategies import signature
from tests.unit.test_verify_refold import _control

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = Settings(topic_commands="cmds", partitions=4)  # type: ignore[arg-type]
G1 = successor(S, first(S), 6)


def _object_moving_down() -> str:
    """An object whose partition among 6 (generation 1) is below its partition among 4 (generation 0)."""
    return next(o for o in (f"o{i}" for i in range(100)) if partition_for(o.encode(), 6) < partition_for(o.encode(), 4))


def _row(topic: str, partition: int, offset: int, command: CreateObject | UpdateObject) -> Row:
    k, v = command.object_id.encode(), codec.encode_command(command)
    return Row(topic, partition, offset, 1000 + offset, k, v, ((SIGNATURE_HEADER, signature(k, v)),))


def test_generation_topics_are_recognised_by_name_and_by_the_archives_pattern() -> None:
    assert [generation_of("cmds", t) for t in ("cmds", "cmds.g1", "cmds.g12")] == [0, 1, 12]
    for other in ("cmds.g0", "cmds.g01", "cmds.g", "cmds.g1x", "cmdsx", "cmds-parked", "xcmds.g1", "cmds.g1.g2"):
        assert generation_of("cmds", other) is None, other
        assert not re.fullmatch(generation_pattern("cmds"), other), other
    assert re.fullmatch(generation_pattern("a.b"), "a.b.g3") and not re.fullmatch(generation_pattern("a.b"), "aXb")
    archived = re.compile(pattern(S))
    wanted = ("cmds", "cmds.g1", "cmds.g10", S.topic_events, S.topic_rejections, S.parked_topic)
    assert all(archived.match(t) for t in wanted)
    assert not any(archived.match(t) for t in (S.parked_log_topic, S.generations_topic, S.rules_topic, "cmds.g0"))
    decoder = Decoder({"cmds": "command", S.topic_events: "event"}, "cmds")
    assert [decoder.kind(t) for t in ("cmds", "cmds.g7", S.topic_events, "other")] == \
        ["command", "command", "event", "unknown"]


def test_every_generation_is_listed_once_in_order_unpaused(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.rescale import generation

    g2 = successor(S, G1, 2)
    records = [Generation(0, "cmds", 4, first(S).checkpoint, True), G1, Generation(**{**G1.__dict__, "paused": True}),
               g2]
    monkeypatch.setattr(generation, "history", lambda _s: records)
    assert [(g.number, g.topic, g.partitions, g.paused) for g in generation.every(S)] == \
        [(0, "cmds", 4, False), (1, "cmds.g1", 6, False), (2, "cmds.g2", 2, False)]
    monkeypatch.setattr(generation, "history", lambda _s: [])
    assert generation.every(S) == [first(S)]


def test_an_objects_commands_fold_generation_after_generation_with_each_generations_settings() -> None:
    oid = _object_moving_down()
    p0, p1 = partition_for(oid.encode(), 4), partition_for(oid.encode(), 6)
    create = CreateObject("c1", oid, "alice", T0, document='{"n": 0}')
    update = UpdateObject("u1", oid, "alice", T0 + timedelta(seconds=1), patch='{"n": 1}')
    retry = UpdateObject("u1", oid, "alice", T0 + timedelta(seconds=1), patch='{"n": 1}')  # across the cut-over
    later = UpdateObject("u2", oid, "alice", T0 + timedelta(seconds=2), patch='{"n": 2}')
    rows = [_row(G1.topic, p1, 0, retry), _row(G1.topic, p1, 1, later), _row("cmds", p0, 5, create),
            _row("cmds", p0, 9, update)]
    topics = CommandTopics.of(S, [first(S), G1])
    got = refold(rows, RulesTimeline(), S, topics=topics)
    state, want = None, []
    for command, settings, partition in ((create, S, p0), (update, S, p0), (retry, overlay(S, G1), p1),
                                         (later, overlay(S, G1), p1)):
        d = decide(state, command, limits_for(S))
        state = d.state if d.accepted else state
        want.append(outcome_record(d.outcome, settings, partition))
    assert [o for o, _ in got.outputs] == want
    kinds = [type(codec.decode_outcome(o[2])).__name__ for o in want]
    assert kinds == ["Event", "Event", "Rejection", "Event"]
    assert codec.decode_rejection(want[2][2]).reason == ReasonCode.DUPLICATE  # the dedup window crossed over
    assert [src[:3] for _, src in got.outputs] == [("cmds", p0, 5), ("cmds", p0, 9), (G1.topic, p1, 0),
                                                   (G1.topic, p1, 1)]
    # a lost output is reported at its command's real topic
    lost = compare(got, [Row(t, p, i, 0, k, v, h) for i, ((t, k, v, p, h), _) in enumerate(got.outputs) if i != 3])
    assert [(f.what, f.source_topic, f.source_partition, f.source_offset) for f in lost] == \
        [("missing", G1.topic, p1, 1)]


def test_generations_are_ordered_by_number_not_by_name() -> None:
    g2 = Generation(2, "cmds.g2", 4, "/c/g2")
    g10 = Generation(10, "cmds.g10", 4, "/c/g10")
    topics = CommandTopics.of(S, [first(S), g2, g10])
    assert topics.names == ("cmds", "cmds.g2", "cmds.g10")
    p = partition_for(b"x", 4)
    rows = [_row("cmds.g10", p, 0, UpdateObject("u", "x", "alice", T0, patch='{"n": 1}')),
            _row("cmds.g2", p, 7, CreateObject("c", "x", "alice", T0, document='{"n": 0}'))]
    got = refold(rows, RulesTimeline(), S, topics=topics)
    assert all(isinstance(codec.decode_outcome(o[2]), Event) for o, _ in got.outputs)


def test_a_new_generations_partitions_start_on_the_rules_the_old_ones_ended_on() -> None:
    topics = CommandTopics.of(S, [first(S), G1])
    controls = [_control(1, p, 3, topic="cmds") for p in range(4)] + [_control(2, 4, 8, topic=G1.topic)]
    t = build_timeline(controls, S, topics)
    assert t.version_at("cmds", 0, 3) is None and t.version_at("cmds", 0, 4) == 1
    assert [t.version_at(G1.topic, p, 0) for p in range(6)] == [1] * 6  # seeded: no control record of its own
    assert t.version_at(G1.topic, 4, 9) == 2 and t.version_at(G1.topic, 5, 9) == 1
    assert sorted(t.documents) == [1, 2] and t.outputs == {}
    with pytest.raises(RulesDiverged):  # a deploy half way when the generation closed: the rescale refuses that
        build_timeline([_control(1, 0, 3, topic="cmds")], S, topics)


def test_a_record_written_to_a_closed_generation_is_rejected_misrouted_and_parked_whole_the_same_every_time() -> None:
    oid = _object_moving_down()
    p0 = partition_for(oid.encode(), 4)
    late = _row("cmds", p0, 12, CreateObject("late", oid, "alice", T0, document='{"n": 0}'))
    topics = CommandTopics.of(S, [first(S), G1], {"cmds": {p0: 12}})
    assert topics.late("cmds", p0, 11) is None and topics.late("cmds", p0, 12) == G1.topic
    assert topics.late(G1.topic, 0, 10**6) is None  # the current generation is never closed
    out = late_outputs(late.key, late.value, late.headers[0][1], "cmds", p0, 12, S, G1.topic)
    assert out == late_outputs(late.key, late.value, late.headers[0][1], "cmds", p0, 12, S, G1.topic)
    (topic, key, value, partition, _), (ptopic, pkey, pvalue, _, _) = out
    rejection = codec.decode_rejection(value)
    assert (topic, key, partition) == (S.topic_rejections, oid.encode(), p0)
    assert rejection.reason == ReasonCode.MISROUTED and G1.topic in rejection.message
    assert rejection.original is not None and (rejection.original.topic, rejection.original.offset) == ("cmds", 12)
    envelope = parked.decode(pvalue)
    assert (ptopic, pkey) == (S.parked_topic, f"cmds[{p0}]@12".encode())
    assert (envelope.value, envelope.key, envelope.signature_state) == (late.value, late.key, parked.VALID)
    # verify expects exactly that, and decides nothing of it
    create = _row("cmds", p0, 3, CreateObject("c", oid, "alice", T0, document='{"n": 0}'))
    got = refold([create, late], RulesTimeline(), S, topics=topics)
    assert [o for o, _ in got.outputs][1:] == out and len(got.decisions) == 1
    # a control record written there late switches nothing either
    t = build_timeline([_control(1, p0, 12, topic="cmds")], S, topics)
    assert t.switches == {} and t.initial == {"cmds": None, G1.topic: None}


def test_verify_checks_the_order_each_writer_keeps_not_the_sweepers_place_among_the_validators() -> None:
    """A later generation's rejection stored before the sweeper's MISROUTED of the same object's late record is
    correct (the sweeper runs beside the new validator); each writer's own order is still checked."""
    oid = _object_moving_down()
    p0, p1 = partition_for(oid.encode(), 4), partition_for(oid.encode(), 6)
    rows = [_row("cmds", p0, 3, CreateObject("c", oid, "alice", T0, document='{"n": 0}')),
            _row("cmds", p0, 12, UpdateObject("late", oid, "alice", T0, patch='{"n": 9}')),
            _row(G1.topic, p1, 0, UpdateObject("b1", oid, "bob", T0, patch='{"n": 1}')),
            _row(G1.topic, p1, 1, UpdateObject("b2", oid, "bob", T0, patch='{"n": 2}'))]
    topics = CommandTopics.of(S, [first(S), G1], {"cmds": {p0: 12}})
    got = refold(rows, RulesTimeline(), S, topics=topics)
    rejections = [o for o, _ in got.outputs if o[0] == S.topic_rejections]
    reasons = [codec.decode_rejection(o[2]).reason for o in rejections]
    assert reasons == [ReasonCode.MISROUTED, ReasonCode.NOT_FOUND, ReasonCode.NOT_FOUND]  # bob: no access

    def stored(outputs: list) -> list[Row]:  # noqa: ANN001
        return [Row(t, p, i, 5000 + i, k, v, h) for i, (t, k, v, p, h) in enumerate(outputs)]

    others = [o for o, _ in got.outputs if o[0] != S.topic_rejections]
    assert compare(got, stored(others + rejections)) == []
    # the new generation's rejections first, the sweeper's after them: the same two writers' orders, clean
    assert compare(got, stored(others + rejections[1:] + rejections[:1])) == []
    # the validator's own two rejections swapped: reported
    swapped = compare(got, stored(others + [rejections[2], rejections[0], rejections[1]]))
    assert [(f.what, f.topic) for f in swapped] == [("order", S.topic_rejections)]


def test_the_status_page_counts_lag_and_hot_keys_on_the_current_generation(tmp_path: Path) -> None:
    from app.status.collector import StatusCollector, validator_progress_path

    s = S.model_copy(update={"var_dir": tmp_path})
    watch = SimpleNamespace(generation=first(s), alive=True, failures=2, last_error="BrokerUnavailable: x",
                            chain=SimpleNamespace(skipped=5))  # what the status page shows of the watch
    collector = StatusCollector(s)
    collector.follow(watch)  # type: ignore[arg-type]
    collector.observe(_outcome("hot"))
    assert list(collector.hot.top(1)) == [partition_for(b"hot", 4)]
    watch.generation = G1
    collector.observe(_outcome("hot"))
    assert list(collector.hot.top(1)) == [partition_for(b"hot", 6)]  # counted afresh on the new partitions

    marks = {"cmds": {p: 100 for p in range(4)}, G1.topic: {p: 10 + p for p in range(6)}, s.topic_events: {0: 5},
             s.topic_rejections: {0: 1}}

    class Consumer:
        def list_topics(self, timeout: float) -> SimpleNamespace:
            return SimpleNamespace(topics={t: SimpleNamespace(partitions=dict.fromkeys(ps), error=None)
                                           for t, ps in marks.items()})

        def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
            return 0, marks[tp.topic][tp.partition]  # type: ignore[attr-defined]

        def close(self) -> None:
            pass

    collector._consumer = Consumer()  # type: ignore[assignment]
    collector.parked.figures = lambda: None  # type: ignore[method-assign]
    path = validator_progress_path(s)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"batchId": 3, "sources": [{"endOffset": {G1.topic: {str(p): 10 for p in range(6)}}}]}))
    data = collector.snapshot()
    assert data["lag_by_partition"] == {str(p): p for p in range(6)}
    assert data["totals"]["commands"] == 400 + sum(10 + p for p in range(6))  # every generation's
    assert data["generation_watch"] == {"generation": 1, "paused": False, "alive": True, "failures": 2,
                                        "last_error": "BrokerUnavailable: x", "skipped_records": 5}


def _outcome(oid: str) -> Event:
    from commands import EventType

    return Event(event_id="e", type=EventType.CREATED, object_id=oid, version=1, command_id="c", principal="alice",
                 occurred_at=T0, owner="alice", document="{}")


def test_a_closed_generation_ends_where_its_validator_committed_and_nowhere_without_offsets(tmp_path: Path) -> None:
    from app.rescale.late import closed_offsets

    assert closed_offsets(str(tmp_path / "gone"), "cmds") is None  # never started, or deleted: nothing is taken late
    (tmp_path / "ck" / "offsets").mkdir(parents=True)
    assert closed_offsets(str(tmp_path / "ck"), "cmds") == {}  # started, committed nothing: everything came late
    (tmp_path / "ck" / "commits").mkdir()
    (tmp_path / "ck" / "commits" / "0").write_text("v1\n{}")
    (tmp_path / "ck" / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"cmds":{"0":5,"1":7}}')
    assert closed_offsets(str(tmp_path / "ck"), "cmds") == {0: 5, 1: 7}


def test_a_generation_holding_only_undecodable_records_of_an_object_keeps_its_state() -> None:
    g2 = successor(S, G1, 2)
    topics = CommandTopics.of(S, [first(S), G1, g2])
    k = b"x"
    garbage = Row(G1.topic, partition_for(k, 6), 0, 0, k, b"not a command", ())  # rejected, never loads the state
    update = _row(g2.topic, partition_for(k, 2), 0, UpdateObject("u", "x", "alice", T0, patch='{"n": 1}'))
    create = _row("cmds", partition_for(k, 4), 0, CreateObject("c", "x", "alice", T0, document='{"n": 0}'))
    got = refold([update, garbage, create], RulesTimeline(), S, topics=topics)
    assert [type(codec.decode_outcome(o[2])).__name__ for o, _ in got.outputs if o[0] != S.parked_topic] == \
        ["Event", "Rejection", "Event"]
