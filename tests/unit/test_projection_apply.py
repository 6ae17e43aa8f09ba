"""The DB projection's fold: create, merge patch, delete, editor changes; idempotent by version; gaps refused."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commands import CreateObject, DeleteObject, Event, EventType, GrantEditor, UpdateObject, decide
from projections.db import fastjson
from projections.db.apply import Status, apply_event
from projections.db.view import ObjectView

pytestmark = pytest.mark.unit
T = datetime(2026, 1, 1, tzinfo=UTC)


def _events() -> list[Event]:
    cmds = [
        CreateObject("c1", "o", "alice", T, document='{"a": 1, "b": {"c": 2}}'),
        UpdateObject("c2", "o", "alice", T, 1, patch='{"b": {"c": null, "d": 3}, "e": [1]}'),
        GrantEditor("c3", "o", "alice", T, editor="bob"),
        UpdateObject("c4", "o", "bob", T, patch='{"a": 9}'),
        DeleteObject("c5", "o", "alice", T),
    ]
    state, out = None, []
    for c in cmds:
        d = decide(state, c)
        assert d.accepted, d.outcome
        state = d.state
        out.append(d.outcome)
    return out


def test_fold_applies_each_event_type() -> None:
    evs, view, docs = _events(), None, []
    for ev in evs:
        res = apply_event(view, ev)
        assert res.status is Status.APPLIED
        view = res.view
        docs.append((view.document, view.version, view.deleted))
    assert docs == [
        ({"a": 1, "b": {"c": 2}}, 1, False),
        ({"a": 1, "b": {"d": 3}, "e": [1]}, 2, False),
        ({"a": 1, "b": {"d": 3}, "e": [1]}, 3, False),   # a grant bumps the version, keeps the document
        ({"a": 9, "b": {"d": 3}, "e": [1]}, 4, False),
        ({}, 5, True),                                     # a tombstone keeps its version
    ]


def test_replayed_events_are_no_ops_and_a_gap_marks_the_view_stale_but_a_delete_still_lands() -> None:
    evs = _events()
    view = apply_event(apply_event(None, evs[0]).view, evs[1]).view
    assert view is not None
    for old in evs[:2]:
        res = apply_event(view, old)
        assert res.status is Status.STALE and res.view is view
    gap = apply_event(view, evs[3])
    assert gap.status is Status.GAP and "stored version 2, event version 4" in gap.detail
    assert gap.view == replace(view, stale=True), "kept at its version, marked stale: reads fail closed"
    gone = apply_event(gap.view, evs[4])
    assert gone.status is Status.GAP and gone.view is not None
    assert (gone.view.deleted, gone.view.version, gone.view.stale) == (True, 5, True)
    missing = apply_event(None, evs[1])
    assert missing.status is Status.GAP and missing.view is not None and missing.view.stale


def test_an_unappliable_document_is_quarantined_and_the_version_lands() -> None:
    ev = _events()[0]
    bad = Event(ev.event_id, ev.type, ev.object_id, 1, ev.command_id, ev.principal, ev.occurred_at, ev.owner,
                document="[1, 2]")
    res = apply_event(None, bad)
    assert res.status is Status.INVALID and res.view is not None
    assert (res.view.version, res.view.owner, res.view.quarantined) == (1, "alice", True)


def test_a_patch_with_u0000_quarantines_the_document_and_later_roles_and_delete_still_land() -> None:
    """The freeze of issue 24: one editor's U+0000 patch used to stop every later event of the object."""
    from commands import GrantReader

    view = _fold([CreateObject("c1", "o", "alice", T, document='{"n": 1}'),
                  GrantReader("c2", "o", "alice", T, reader="bob"), GrantEditor("c3", "o", "alice", T, editor="eve")])
    nul = Event("e4", EventType.UPDATED, "o", 4, "c4", "eve", T, "alice", patch='{"n": "a\\u0000b"}')
    res = apply_event(view, nul)
    assert res.status is Status.INVALID and "U+0000" in res.detail and res.view is not None
    assert (res.view.version, res.view.quarantined, res.view.document) == (4, True, {"n": 1})
    later = [Event("e5", EventType.READER_REVOKED, "o", 5, "c5", "alice", T, "alice", reader="bob"),
             Event("e6", EventType.UPDATED, "o", 6, "c6", "alice", T, "alice", patch='{"m": 2}'),
             Event("e7", EventType.DELETED, "o", 7, "c7", "alice", T, "alice")]
    view = res.view
    for ev in later:
        step = apply_event(view, ev)
        assert step.status is Status.APPLIED, step
        view = step.view
    assert view is not None and (view.version, view.deleted, view.readers, view.editors) == (7, True, (), ("eve",))
    assert view.quarantined and ObjectView.from_bytes(view.to_bytes()) == view


def test_view_bytes_are_canonical() -> None:
    a = ObjectView({"b": 1, "a": {"y": 2, "x": "é"}}, 3, False, "alice", "t")
    b = ObjectView(json.loads('{"a": {"x": "é", "y": 2}, "b": 1}'), 3, False, "alice", "t")
    assert a.to_bytes() == b.to_bytes()
    assert ObjectView.from_bytes(a.to_bytes()) == a


# --- fastjson: orjson where it agrees with the standard library, json where it would not ---------------------

_JSON_TEXT = ["{}", '{"a": 1}', '{"big": 123456789012345678901234567890}', '{"neg": -9999999999999999999}',
              '{"u64": 18446744073709551615}', '{"x": NaN, "y": Infinity, "z": -Infinity}', '{"f": 1E400}',
              '{"s": "\\ud800"}', '{"e": 1.5e-7, "g": 1e22, "h": -0.0, "i": 5e-324}', '{"n": null, "t": [true, false]}',
              '{"c": "\\u0000\\u001f\\u007f\\u2028 é 😀", "\\ud83d\\ude00": 1}', '{"a": 1, "a": 2}', " [1, 2] ",
              "", "{", "[1,]", '{"a": 1} x', "\ufeff{}", "nul", '"text"', "12345678901234567890.5"]


@pytest.mark.parametrize("text", _JSON_TEXT)
def test_fastjson_loads_like_json(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError as e:
        with pytest.raises(ValueError) as got:
            fastjson.loads(text)
        assert str(got.value) == str(e)  # the same message lands in the gap report
        return
    got_value = fastjson.loads(text)
    assert json.dumps(got_value, sort_keys=True) == json.dumps(expected, sort_keys=True)  # NaN-safe comparison
    assert json.dumps(fastjson.loads(text.encode()), sort_keys=True) == json.dumps(expected, sort_keys=True)


_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                       lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                       max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_fastjson_dumps_is_byte_identical_to_canonical_json(value: object) -> None:
    try:
        expected = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # lone surrogates: json cannot write them as UTF-8 either
        with pytest.raises(UnicodeEncodeError):
            fastjson.dumps(value)
        return
    assert fastjson.dumps(value) == expected
    assert json.dumps(fastjson.loads(expected), sort_keys=True) == json.dumps(value, sort_keys=True)


def test_lone_surrogate_payload_is_invalid_not_a_crash() -> None:
    # decide refuses these now, but events written before that must not crash-loop the projection.
    ev = _events()[0]
    bad = Event(ev.event_id, ev.type, ev.object_id, 1, ev.command_id, ev.principal, ev.occurred_at, ev.owner,
                document='{"a": "\\ud800"}')
    res = apply_event(None, bad)
    assert res.status is Status.INVALID and "surrogate" in res.detail


def _fold(cmds: list[object]) -> ObjectView | None:
    state, view = None, None
    for c in cmds:
        d = decide(state, c)  # type: ignore[arg-type]
        assert d.accepted, d.outcome
        state = d.state
        res = apply_event(view, d.outcome)  # type: ignore[arg-type]
        assert res.status is Status.APPLIED, res
        view = res.view
    return view


def test_roles_follow_grants_and_revokes_and_survive_delete() -> None:
    from commands import GrantReader, RevokeEditor, RevokeReader

    view = _fold([
        CreateObject("c1", "o", "alice", T, document='{"a": 1}'),
        GrantEditor("c2", "o", "alice", T, editor="bob"),
        GrantReader("c3", "o", "alice", T, reader="carol"),
        GrantReader("c4", "o", "alice", T, reader="dave"),
        RevokeReader("c5", "o", "alice", T, reader="carol"),
        GrantEditor("c6", "o", "alice", T, editor="erin"),
        RevokeEditor("c7", "o", "alice", T, editor="bob"),
    ])
    assert view is not None and (view.owner, view.editors, view.readers) == ("alice", ("erin",), ("dave",))
    assert view.document == {"a": 1} and view.version == 7
    assert ObjectView.from_bytes(view.to_bytes()) == view
    deleted = apply_event(view, decide(None, CreateObject("x", "o", "alice", T, document="{}")).outcome)  # type: ignore[arg-type]
    assert deleted.status is Status.STALE
    gone = _fold([CreateObject("c1", "o", "alice", T, document='{"a": 1}'),
                  GrantReader("c2", "o", "alice", T, reader="dave"), DeleteObject("c3", "o", "alice", T)])
    assert gone is not None and gone.deleted and gone.readers == ("dave",) and gone.document == {}


def test_views_stored_before_roles_read_with_none() -> None:
    old = b'{"at":null,"del":false,"doc":{"a":1},"owner":"alice","v":3}'
    view = ObjectView.from_bytes(old)
    assert (view.owner, view.editors, view.readers, view.version) == ("alice", (), (), 3)


@pytest.mark.parametrize("payload", ['{"a": NaN}', '{"a": Infinity}', '{"a": 1e400}', '{"a": "\\ud800"}',
                                     '{"a": "\\u0000"}', '{"a\\u0000": 1}'])
def test_a_payload_that_could_not_be_served_as_json_is_not_applied(payload: str) -> None:
    ev = Event("e", EventType.CREATED, "o", 1, "c", "alice", T, "alice", payload)
    res = apply_event(None, ev)
    assert res.status is Status.INVALID and res.view is not None and res.view.quarantined


def test_an_escaped_backslash_before_u0000_is_not_u0000() -> None:
    ev = Event("e", EventType.CREATED, "o", 1, "c", "alice", T, "alice", '{"a": "\\\\u0000"}')
    res = apply_event(None, ev)
    assert res.status is Status.APPLIED and res.view is not None and res.view.document == {"a": "\\u0000"}
