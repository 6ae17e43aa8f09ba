"""``app.verify``: the per-object re-decision and byte comparison, the rules timeline from control records, and the
what-if report's HTML — without Spark (the Spark job only groups rows and hands them here)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.rules.control import CONTROL_HEADER, CONTROL_KEY, RULES_CONTROL, Deploy, encode_control
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.validator.fold import limits_for
from app.validator.murmur2 import partition_for
from app.validator.outputs import outcome_record
from app.verify.html import render
from app.verify.refold import Row, compare, refold
from app.verify.timeline import RulesTimeline, build_timeline
from app.verify.whatif import Flip, WhatIfReport
from commands import CreateObject, DeleteObject, UpdateObject, decide
from commands.rules import canonical_rules, rules_digest
from schemas import codec
from tests.unit.record_strategies import control_signature, signature

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = Settings()
DOC = canonical_rules('{"rules": 1, "types": {}}')
PART = partition_for(b"o1", S.partitions)


def _commands() -> list[CreateObject | UpdateObject | DeleteObject]:
    return [CreateObject("c1", "o1", "alice", T0, document='{"n": 0}'),
            UpdateObject("u1", "o1", "bob", T0 + timedelta(seconds=1), patch='{"n": 1}'),  # FORBIDDEN
            UpdateObject("u2", "o1", "alice", T0 + timedelta(seconds=2), patch='{"n": 1}'),
            DeleteObject("d1", "o1", "alice", T0 + timedelta(seconds=3)),
            UpdateObject("u3", "o1", "alice", T0 + timedelta(seconds=4), patch='{"n": 2}')]  # DELETED


def _rows(partition: int = PART) -> list[Row]:
    out = []
    for i, c in enumerate(_commands()):
        k, v = c.object_id.encode(), codec.encode_command(c)
        out.append(Row(S.topic_commands, partition, 10 + i, 1000 + i, k, v, ((SIGNATURE_HEADER, signature(k, v)),)))
    return out


def _stored(expected_outputs: list, start: int = 0) -> list[Row]:  # noqa: ANN001
    return [Row(t, p, start + i, 5000 + i, k, v, h) for i, ((t, k, v, p, h), _) in enumerate(expected_outputs)]


def test_refold_decides_as_a_sequential_decide_and_a_faithful_copy_compares_clean() -> None:
    part = PART
    got = refold(_rows(part), RulesTimeline(), S)
    state = None
    want = []
    for c in _commands():
        d = decide(state, c, limits_for(S))
        state = d.state if d.accepted else state
        want.append(outcome_record(d.outcome, S, part))
    assert [o for o, _ in got.outputs] == want
    assert [src for _, src in got.outputs] == [(S.topic_commands, part, 10 + i, 1000 + i) for i in range(5)]
    assert compare(got, _stored(got.outputs)) == []
    # a replayed micro-batch writes identical copies again: still clean
    assert compare(got, _stored(got.outputs) + _stored(got.outputs[:2], start=100)) == []


def test_a_tampered_record_is_divergent_at_its_coordinates_and_a_lost_one_missing_at_its_command() -> None:
    got = refold(_rows(), RulesTimeline(), S)
    stored = _stored(got.outputs)
    bad = stored[2]._replace(value=stored[2].value[:-1] + bytes([stored[2].value[-1] ^ 1]))
    found = compare(got, [*stored[:2], bad, *stored[3:]])
    assert [(f.what, f.topic, f.partition, f.offset) for f in found] == [
        ("divergent", bad.topic, bad.partition, bad.offset),
        ("missing", stored[2].topic, PART, -1)]
    assert (found[1].source_topic, found[1].source_partition, found[1].source_offset) == (S.topic_commands, PART, 12)
    lost = compare(got, stored[:1] + stored[2:])
    assert [(f.what, f.source_offset) for f in lost] == [("missing", 11)]
    # --since reports only what reached the topics since then (the fold still starts at the first command)
    assert compare(got, stored[:1] + stored[2:], since_ms=1002) == []


def test_outputs_in_another_order_are_reported() -> None:
    got = refold(_rows(), RulesTimeline(), S)
    stored = _stored(got.outputs)
    events = [r for r in stored if r.topic == S.topic_events]
    swapped = [r for r in stored if r.topic != S.topic_events] + [
        events[1]._replace(offset=events[0].offset), events[0]._replace(offset=events[1].offset), *events[2:]]
    found = compare(got, swapped)
    assert [(f.what, f.topic, f.offset) for f in found] == [("order", S.topic_events, events[0].offset)]


def _control(version: int, partition: int, offset: int, *, signed: bool = True,
             topic: str = S.topic_commands) -> tuple:  # noqa: ANN001
    value = encode_control(Deploy(version, rules_digest(DOC), DOC, "ops", T0))
    return topic, partition, offset, CONTROL_KEY, value, control_signature(CONTROL_KEY, value) if signed else None


def test_the_timeline_switches_each_partition_at_its_genuine_control_records() -> None:
    t = build_timeline([_control(2, 0, 9), _control(1, 0, 5), _control(3, 0, 7, signed=False), _control(1, 1, 2)], S)
    topic = S.topic_commands
    assert [t.version_at(topic, 0, o) for o in (0, 5, 6, 8, 9, 10)] == [None, None, 1, 1, 1, 2]
    assert t.version_at(topic, 1, 3) == 1 and t.version_at(topic, 2, 100) is None
    assert sorted(t.documents) == [1, 2]
    refused = codec.decode_rejection(t.outputs[(topic, 0, 7)][2])  # the forged one switched nothing and is an output
    assert refused.reason.value == "UNAUTHENTICATED" and set(t.outputs) == {(topic, 0, 7)}
    c = t.with_candidate(DOC, 1500)
    assert c.candidate == 3 and c.version_at(topic, 0, 10, 1499) == 2 and c.version_at(topic, 0, 10, 1500) == 3


def test_a_control_record_in_a_group_expects_its_refusal_and_decides_nothing() -> None:
    topic, p, o, k, v, _ = _control(1, PART, 7, signed=False)
    t = build_timeline([(topic, p, o, k, v, None)], S)
    row = Row(topic, p, o, 0, k, v, ((CONTROL_HEADER, RULES_CONTROL),))
    got = refold([row], t, S)
    assert got.decisions == [] and [x for x, _ in got.outputs] == [t.outputs[(topic, p, o)]]


def test_the_html_report_is_self_contained_and_escapes_what_it_shows() -> None:
    flips = [Flip("<o1>", "c&1", "UpdateObject", 0, i, 1_767_225_600_000 + 1000 * i,
                  "accepted->rejected" if i % 2 else "rejected->accepted", "guard<x>", "RULE_VIOLATED",
                  "ACCEPTED UPDATED", "REJECTED RULE_VIOLATED [guard<x>]") for i in range(6)]
    page = render(WhatIfReport(10, 0, "sha256:ab", tuple(flips)))
    assert "<o1>" not in page and "&lt;o1&gt;" in page and "guard&lt;x&gt;" in page
    assert page.count("<rect") == 6 and "<script" not in page
    assert "src=" not in page and "href=" not in page and "@import" not in page


def test_the_cli_parses_verify_replay_and_rules_what_if() -> None:
    import argparse

    from app.cli import build_parser
    from app.cli.verify import since_ms

    assert since_ms("2026-01-01T00:00:00Z") == 1_767_225_600_000
    with pytest.raises(argparse.ArgumentTypeError, match="no zone"):
        since_ms("2026-01-01T00:00:00")
    args = build_parser().parse_args(["verify", "replay", "--since", "2026-01-01T00:00:01Z", "--objects", "a,b"])
    assert (args.since, args.objects) == (1_767_225_601_000, "a,b")
    args = build_parser().parse_args(["rules", "what-if", "c.yaml", "--html", "r.html"])
    assert (str(args.file), str(args.html), args.since) == ("c.yaml", "r.html", None)


def test_sorted_groups_hand_each_keys_run_to_the_group_even_across_batches() -> None:
    import pyarrow as pa

    from app.verify.replay import SortedGroups

    def batch(keys: list[bytes | None]) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([{"topic": "t", "partition": 0, "offset": i, "timestamp_ms": 0, "key": k,
                                            "value": b"", "headers": []} for i, k in enumerate(keys)])

    seen: list[tuple[bytes | None, int]] = []

    def group(rows: list[Row]) -> list[dict[str, object]]:
        seen.append((rows[0].key, len(rows)))
        return [{"n": len(rows)}]

    out = list(SortedGroups(group, pa.schema([("n", pa.int64())]))(iter([batch([None, b"a", b"a"]), batch([b"a", b"b"]),
                                                                          batch([b"b"])])))
    assert seen == [(None, 1), (b"a", 3), (b"b", 2)]
    assert sum(b.num_rows for b in out) == 3


def test_an_erased_object_is_reported_apart_and_a_null_value_no_erasure_names_is_divergent() -> None:
    from app.verify.replay import VerifyGroup

    commands = _rows()
    stored = _stored(refold(commands, RulesTimeline(), S).outputs)
    # what ``arbiter erase`` leaves: every value nulled but the DELETED event's, each nulled row in the erasure record
    def kept(r: Row) -> bool:
        return r.topic == S.topic_events and codec.decode_event(r.value or b"").type.value == "DELETED"

    nulled = [r if kept(r) else r._replace(value=None) for r in [*commands, *stored]]
    record = {(r.topic, r.partition, r.offset): "o1" for r in nulled if r.value is None}
    assert len(record) == len(nulled) - 1
    group = VerifyGroup(S, RulesTimeline(), None, record)
    assert group([*commands, *stored]) == [{"what": "summary", "commands": 5, "expected": 5, "stored": 5}]
    assert group(nulled) == [{"what": "erased", "topic": S.topic_commands, "detail": "o1", "commands": 5, "stored": 5}]
    # one nulled value the erasure does not name: a divergence at its coordinates, beside the erased object
    forged = stored[0]._replace(offset=99, value=None)
    found = group([*nulled, forged])
    assert [(f["what"], f["topic"], f.get("offset")) for f in found] == [("divergent", forged.topic, 99),
                                                                   ("erased", S.topic_commands, None)]
    # no erasure recorded at all: every nulled record is a divergence, and the fold still runs
    plain = VerifyGroup(S, RulesTimeline(), None)([*commands[:1], commands[1]._replace(value=None), *commands[2:],
                                                    *stored])
    assert ("divergent", commands[1].offset) in [(f["what"], f.get("offset")) for f in plain]
    assert plain[-1]["what"] == "summary"


def test_rows_of_a_batch_equal_its_records_read_one_by_one_whatever_the_slicing() -> None:
    import pyarrow as pa

    from app.verify.replay import rows_of, to_row

    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    lists = [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None, [], [{"key": "c", "value": b"3"}], None,
             [{"key": "a", "value": b"x"}]]
    table = pa.table({"topic": ["t"] * 6, "partition": pa.array([0] * 6, pa.int32()),
                      "offset": pa.array(range(6), pa.int64()), "timestamp_ms": pa.array([0] * 6, pa.int64()),
                      "key": pa.array([b"k", None, b"k", b"j", b"j", b""]),
                      "value": pa.array([b"v", b"w", None, b"", b"z", b"q"]),
                      "headers": pa.array(lists, headers)})
    # as ``by_key`` hands them over: the headers split into two lists
    split = table.drop_columns(["headers"]).append_column(
        "header_keys", pa.array([None if x is None else [h["key"] for h in x] for x in lists], pa.list_(pa.string()))
    ).append_column(
        "header_values", pa.array([None if x is None else [h["value"] for h in x] for x in lists],
                                  pa.list_(pa.binary())))
    for t in (table, split):
        batches = [b for size in (1, 2, 4, 6) for b in t.to_batches(max_chunksize=size)]
        batches += [t.slice(start).to_batches()[0] for start in range(6)]
        for b in batches:
            whole = table.slice(b.column("offset")[0].as_py(), b.num_rows).to_pylist()
            assert rows_of(b) == [to_row(d) for d in whole]
    assert rows_of(table.slice(0, 1).to_batches()[0])[0].headers == (("a", b"1"), ("b", b""))
