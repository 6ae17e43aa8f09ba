"""The DB projection's fold: create, merge patch, delete, editor changes; idempotent by version; gaps refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from commands import CreateObject, DeleteObject, Event, GrantEditor, UpdateObject, decide
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


def test_replayed_events_are_no_ops_and_a_gap_is_refused() -> None:
    evs = _events()
    view = apply_event(apply_event(None, evs[0]).view, evs[1]).view
    for old in evs[:2]:
        res = apply_event(view, old)
        assert res.status is Status.STALE and res.view is view
    gap = apply_event(view, evs[3])
    assert gap.status is Status.GAP and gap.view is view and "stored version 2, event version 4" in gap.detail
    assert apply_event(None, evs[1]).status is Status.GAP


def test_unappliable_payloads_are_reported_not_applied() -> None:
    ev = _events()[0]
    bad = Event(ev.event_id, ev.type, ev.object_id, 1, ev.command_id, ev.principal, ev.occurred_at, ev.owner,
                document="[1, 2]")
    assert apply_event(None, bad).status is Status.INVALID


def test_view_bytes_are_canonical() -> None:
    a = ObjectView({"b": 1, "a": {"y": 2, "x": "é"}}, 3, False, "alice", "t")
    b = ObjectView(json.loads('{"a": {"x": "é", "y": 2}, "b": 1}'), 3, False, "alice", "t")
    assert a.to_bytes() == b.to_bytes()
    assert ObjectView.from_bytes(a.to_bytes()) == a
