"""The API's advisory pre-check of a patch: against its type's patch schema only, for the owner of a live typed
object the audit trail knows; and, whatever the audit trail's view (stale or current), it never refuses a patch the
validator would accept under the same rules."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from app.api.rules import RulesView, precheck
from app.read_models import audit_root
from app.rules.control import Deploy
from app.settings import Settings
from commands import (
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    ObjectState,
    ReasonCode,
    Rejection,
    UpdateObject,
    decide,
)
from commands.rules import RuleSet
from projections.audit import AuditProjection
from projections.audit.outcomes import AuditOutcomes
from projections.runner import Item, Record
from schemas import codec
from tests.unit.rules_support import ORDER, T0, orders

pytestmark = pytest.mark.unit

RULES = orders(version=4)


def view(latest: Event | None, rules: RuleSet = RULES) -> RulesView:
    v = RulesView(Settings(), latest=lambda object_id: latest if latest is not None and latest.object_id == object_id
                  else None)
    v.seen(Deploy(rules.version, rules.digest, rules.document, "ops", T0))
    asyncio.run(v.compiled_newest())  # compiled in the background: a pre-check before that is skipped
    return v


def patch(body: dict[str, Any], principal: str = "alice", expected: int | None = None,  # noqa: ANN401
          n: int = 1) -> UpdateObject:
    return UpdateObject(f"p{n}", "o1", principal, T0 + timedelta(seconds=n), expected, patch=json.dumps(body))


def created(object_type: str | None = "order") -> tuple[ObjectState | None, Event]:
    d = decide(None, CreateObject("c1", "o1", "alice", T0, document=json.dumps(ORDER), object_type=object_type),
               rules=RULES)
    assert isinstance(d.outcome, Event)
    return d.state, d.outcome


def test_a_patch_its_types_patch_schema_refuses_is_refused_early_naming_rule_pointer_and_version() -> None:
    _, event = created()
    early = asyncio.run(precheck(view(event), patch({"priority": 9})))
    assert early is not None and early.reason is ReasonCode.RULE_VIOLATED and early.rules_version == 4
    assert early.rule == "order:patch_schema" and early.rule_pointers == ("/priority",)
    assert asyncio.run(precheck(view(event), patch({"priority": 2}))) is None  # the schema allows it


def test_everything_a_patch_schema_cannot_say_alone_is_left_to_the_validator() -> None:
    state, event = created()
    bad = {"priority": 9}
    assert asyncio.run(precheck(view(event), patch(bad, principal="mallory"))) is None  # an outsider learns nothing
    assert asyncio.run(precheck(view(event), patch(bad, principal="bob"))) is None  # an editor: grants not known
    assert asyncio.run(precheck(view(None), patch(bad))) is None  # the audit trail does not know it
    assert asyncio.run(precheck(view(event), patch(bad, expected=7))) is None  # If-Match says another version
    gone = decide(state, DeleteObject("d1", "o1", "alice", T0 + timedelta(seconds=1)), rules=RULES).outcome
    assert isinstance(gone, Event) and asyncio.run(precheck(view(gone), patch(bad))) is None
    assert asyncio.run(precheck(view(created(None)[1]), patch(bad))) is None  # untyped: no rules apply
    # the transition and the guards read the validator's state: never judged from the audit's event
    assert asyncio.run(precheck(view(event), patch({"status": "approved"}))) is None
    assert asyncio.run(precheck(view(event), patch({"customer": "other"}))) is None
    v5 = RuleSet(5, RULES.digest, RULES.document)  # the newest version the API has seen is the one named
    later = asyncio.run(precheck(view(event, v5), patch(bad)))
    assert later is not None and later.rules_version == 5
    r = RulesView(Settings())  # no audit trail reader: patches are not pre-checked
    r.seen(Deploy(4, RULES.digest, RULES.document, "ops", T0))
    assert asyncio.run(precheck(r, patch(bad))) is None


_STATUS = st.sampled_from(["draft", "submitted", "approved", "rejected", "shipped", ""])
_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-3, 60000), _STATUS, st.text(max_size=3),
                   st.floats(allow_nan=False, allow_infinity=False, width=32))
_PATCH = st.dictionaries(st.sampled_from(["status", "amount", "priority", "title", "customer", "notes"]), _VALUE,
                         max_size=3)
_STEP = st.one_of(_PATCH.map(lambda p: ("patch", p)), st.just(("grant", "bob")), st.just(("delete", None)))


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(_STEP, st.sampled_from(["alice", "bob"]), st.sampled_from(["finance"]).map(
    lambda g: (g,)) | st.just(())), max_size=6), known=st.integers(0, 10), final=_PATCH,
    principal=st.sampled_from(["alice", "bob", "carol"]), expected=st.none() | st.integers(0, 8))
def test_the_patch_precheck_never_refuses_what_the_validator_accepts(
        steps: list[tuple[tuple[str, Any], str, tuple[str, ...]]], known: int, final: dict[str, Any],  # noqa: ANN401
        principal: str, expected: int | None) -> None:
    state, first = created()
    events = [first]
    for n, ((kind, arg), who, groups) in enumerate(steps, start=10):
        at = T0 + timedelta(seconds=n)
        cmd = (UpdateObject(f"s{n}", "o1", who, at, patch=json.dumps(arg), groups=groups) if kind == "patch" else
               GrantEditor(f"s{n}", "o1", who, at, editor=arg) if kind == "grant" else
               DeleteObject(f"s{n}", "o1", who, at))
        d = decide(state, cmd, rules=RULES)
        if isinstance(d.outcome, Event):
            state = d.state
            events.append(d.outcome)
    audited = events[min(known, len(events) - 1)]  # the audit trail may lag the validator: any event it had
    cmd = patch(final, principal, expected, n=99)
    early = asyncio.run(precheck(view(audited), cmd))
    event("refused early" if early is not None else "left to the validator")
    if early is not None:
        truth = decide(state, cmd, rules=RULES).outcome
        assert isinstance(truth, Rejection), (early.rule, truth)
        assert early.rule == "order:patch_schema" and early.rules_version == RULES.version


def test_the_audit_trail_answers_with_the_objects_newest_event_in_one_seek(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    state, first = created()
    second = decide(state, patch({"priority": 2}), rules=RULES).outcome
    refused = decide(state, patch({"priority": 9}, n=2), rules=RULES).outcome
    other = decide(None, CreateObject("c2", "o10", "bob", T0, document="{}")).outcome  # "o1" is a prefix of its id
    items = [Item(Record(topic, part, at, o.object_id.encode(), codec.encode_outcome(o), 0), o)  # type: ignore[union-attr]
             for topic, part, at, o in [(s.topic_events, 1, 0, first), (s.topic_rejections, 3, 0, refused),
                                        (s.topic_events, 1, 1, second), (s.topic_events, 2, 0, other)]]
    audit = AuditProjection(audit_root(s))
    audit.apply(items)
    audit.close()
    outcomes = AuditOutcomes(audit_root(s))
    assert outcomes.latest_event("o1", s.topic_events) == second
    assert outcomes.latest_event("o10", s.topic_events) == other
    assert outcomes.latest_event("o", s.topic_events) is None and outcomes.latest_event("o2", s.topic_events) is None
    assert outcomes.latest_event("o1", s.topic_rejections) is None  # a rejection is no event
    outcomes.close()
    assert AuditOutcomes(tmp_path / "none").latest_event("o1", s.topic_events) is None  # no audit store yet


def test_a_patch_no_types_patch_schema_refuses_costs_no_lookup() -> None:
    _, made = created()
    asked: list[str] = []

    def latest(object_id: str) -> Event | None:
        asked.append(object_id)
        return made

    v = RulesView(Settings(), latest=latest)
    v.seen(Deploy(RULES.version, RULES.digest, RULES.document, "ops", T0))
    asyncio.run(v.compiled_newest())
    assert asyncio.run(precheck(v, patch({"priority": 2, "status": "approved"}))) is None
    assert asked == []  # most patches: no thread hop, no read of the audit trail
    assert asyncio.run(precheck(v, patch({"priority": 9}))) is not None and asked == ["o1"]
