"""Rules in warn and audit mode: evaluated where an enforced rule is, never refusing, the would-be refusal carried
in the event; the enforced rules decide exactly as if the others were absent (issue 52)."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.telemetry.metrics import ApiMetrics
from app.api.writes.submit import _decided as decided
from app.api.writes.summary import summarize
from app.cli import main
from app.settings import Settings
from app.status.collector import StatusCollector
from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    EventType,
    ObjectState,
    Rejection,
    RuleWarning,
    UpdateObject,
    decide,
)
from commands.rules import RuleSet, RulesInvalid
from commands.rules.cases import run_cases
from schemas import codec
from tests.unit.rules_support import T0, create_order, orders, update, with_rules
from tests.unit.test_rules_properties import GROUPS, PATCH_MEMBERS, documents

pytestmark = pytest.mark.unit

ORDER_RULES = json.loads(orders().document)
#: The order type's rules that may take a mode: its transition, then its guards (document order).
RULES = ("transitions", 0), ("guards", 0), ("guards", 1)


def moded(modes: dict[tuple[str, int], str], document_mode: str | None = None, version: int = 1) -> RuleSet:
    """Return the order example with ``modes`` given to some of its rules (and the document a mode)."""
    doc = json.loads(json.dumps(ORDER_RULES))
    for (kind, i), mode in modes.items():
        doc["types"]["order"][kind][i]["mode"] = mode
    if document_mode is not None:
        doc["mode"] = document_mode
    return with_rules(doc, version)


def without(modes: dict[tuple[str, int], str], version: int = 1) -> RuleSet:
    """Return the order example without the rules ``modes`` names."""
    doc = json.loads(json.dumps(ORDER_RULES))
    for kind in ("transitions", "guards"):
        doc["types"]["order"][kind] = [r for i, r in enumerate(doc["types"]["order"][kind])
                                       if (kind, i) not in modes]
    return with_rules(doc, version)


def test_a_transition_in_warn_mode_lets_the_move_pass_and_says_so_in_the_event() -> None:
    rules = moded({("transitions", 0): "warn"})
    state = create_order(rules).state
    assert state is not None
    decision = update(state, {"status": "approved"}, rules, groups=("finance",))
    event = decision.outcome
    assert isinstance(event, Event), event
    assert event.warnings == (RuleWarning("order:status-flow", "warn", "RULE_VIOLATED",
                                          "an order moves draft -> submitted -> approved or rejected, and never back",
                                          ("/status",)),)
    assert decision.state is not None and json.loads(decision.state.tracked or "")["/status"] == "approved"
    assert codec.decode_outcome(codec.encode_outcome(event)) == event  # the warnings survive the topic
    enforced = update(state, {"status": "approved"}, orders(), groups=("finance",)).outcome
    assert isinstance(enforced, Rejection) and enforced.rule == "order:status-flow"


def test_the_document_mode_covers_its_schemas_but_never_the_built_in_bound_or_types() -> None:
    rules = moded({}, document_mode="audit")
    decision = create_order(rules, priority=9, status="submitted")  # the create schema and the transition fail
    event = decision.outcome
    assert isinstance(event, Event), event
    assert [(w.rule, w.mode) for w in event.warnings] == [("order:create_schema", "audit"),
                                                          ("order:status-flow", "audit")]
    unknown = decide(None, CreateObject("c9", "o9", "alice", T0, document="{}", object_type="invoice"),
                     rules=rules).outcome
    assert isinstance(unknown, Rejection) and unknown.rule == "types"
    doc = json.loads(json.dumps(ORDER_RULES))
    doc["mode"] = "warn"
    doc["types"]["order"]["max_tracked_bytes"] = 20
    big = create_order(with_rules(doc), customer="a customer with a long name").outcome
    assert isinstance(big, Rejection) and big.rule == "order:max_tracked_bytes"


def test_a_guard_in_audit_mode_warns_and_an_enforced_one_still_refuses_without_warnings() -> None:
    rules = moded({("guards", 0): "audit"})
    state = create_order(rules).state
    assert state is not None
    state = update(state, {"status": "submitted"}, rules).state
    assert state is not None
    approved = update(state, {"status": "approved"}, rules).outcome  # over 10,000 without finance
    assert isinstance(approved, Event)
    assert [(w.rule, w.mode, w.message) for w in approved.warnings] == [
        ("order:finance-approves-large", "audit", "approval over 10,000 needs finance")]
    refused = update(state, {"status": "approved", "customer": "globex"}, rules).outcome
    assert isinstance(refused, Rejection) and refused.rule == "order:customer-immutable"


def test_a_guard_in_warn_mode_that_fails_to_evaluate_is_a_rule_error_warning() -> None:
    doc = json.loads(json.dumps(ORDER_RULES))
    doc["types"]["order"]["guards"].append({"name": "odd", "expr": "next.amount / 0 > 1", "message": "m",
                                            "mode": "warn"})
    rules = with_rules(doc)
    state = create_order(rules).state
    assert state is not None
    event = update(state, {"title": "new"}, rules).outcome
    assert isinstance(event, Event)
    assert [(w.rule, w.reason) for w in event.warnings] == [("order:odd", "RULE_ERROR")]
    assert "evaluation failed" in event.warnings[0].message


def test_rules_check_lists_the_rules_that_never_refuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(json.dumps(ORDER_RULES))
    doc["mode"] = "audit"
    doc["types"]["order"]["guards"][1]["mode"] = "enforce"
    doc["types"]["order"]["transitions"][0]["mode"] = "warn"
    del doc["tests"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert main(["rules", "check", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "rules in warn or audit mode (never refuse): order:create_schema (audit), order:patch_schema (audit), "
        "order:status-flow (warn), order:finance-approves-large (audit), ticket:create_schema (audit), "
        "ticket:at-most-20-watchers (audit)")


def test_the_mode_is_part_of_the_version_a_promotion_is_a_new_digest() -> None:
    assert moded({("guards", 0): "warn"}).digest != orders().digest
    assert moded({("guards", 0): "enforce"}).digest != orders().digest  # the text differs, the decisions do not
    with pytest.raises(RulesInvalid, match="mode"):
        moded({("guards", 0): "dry-run"})


def test_cases_may_expect_a_warning_and_count_it_as_exercised() -> None:
    doc = json.loads(json.dumps(ORDER_RULES))
    doc["types"]["order"]["guards"][0]["mode"] = "warn"
    doc["tests"] = [{"name": "large approval warns", "given": [
        {"kind": "create", "type": "order", "document": {"title": "t", "priority": 1, "customer": "c",
                                                          "amount": 20000, "status": "draft"}},
        {"kind": "update", "patch": {"status": "submitted"}}],
        "when": {"kind": "update", "patch": {"status": "approved"}},
        "then": {"warned": "order:finance-approves-large"}},
        {"name": "it is not refused", "when": {"kind": "create", "type": "order", "document": {
            "title": "t", "priority": 1, "customer": "c", "amount": 1, "status": "draft"}},
         "then": {"warned": "order:finance-approves-large"}}]
    report = run_cases(json.dumps(doc))
    assert [r.problem is None for r in report.results] == [True, False]
    assert "accepted with a warning of order:finance-approves-large, got accepted" in (report.results[1].problem or "")
    assert "order:finance-approves-large" not in report.unexercised_rules


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Patches that move an order's tracked fields (the status most often): what the rules look at.
moving = st.fixed_dictionaries({"status": PATCH_MEMBERS["status"]},
                               optional={k: v for k, v in PATCH_MEMBERS.items() if k != "status"})


@st.composite
def order_lives(draw: st.DrawFn) -> list[Command]:
    """Draw an order's life by its owner: a create (of the example, some members changed), then updates and deletes
    in any groups, without expected versions: the commands the generic checks let through, for the rules to decide."""
    doc = {k: v for k, v in draw(documents).items() if v is not None}
    out: list[Command] = [CreateObject("c0", "o1", "alice", T0, document=json.dumps(doc), object_type="order")]
    for i in range(1, draw(st.integers(1, 16))):
        common: dict[str, Any] = {"groups": draw(st.sampled_from(GROUPS))}
        at = T0 + timedelta(seconds=i)
        if draw(st.integers(0, 9)):
            out.append(UpdateObject(f"c{i}", "o1", "alice", at, patch=json.dumps(draw(moving)), **common))
        else:
            out.append(DeleteObject(f"c{i}", "o1", "alice", at, **common))
    return out
modes = st.dictionaries(st.sampled_from(RULES), st.sampled_from(("warn", "audit")), min_size=1)


@functools.cache
def _compiled(chosen: frozenset[tuple[tuple[str, int], str]]) -> tuple[RuleSet, RuleSet, RuleSet]:
    """The documents one choice of modes needs, compiled once (26 choices; a compile per example made this test
    the unit tier's slowest: development.md, *build once what every example reuses*)."""
    modes = dict(chosen)
    return moded(modes), without(modes), orders()


def _plain(outcome: Event | Rejection) -> bytes:
    return codec.encode_outcome(replace(outcome, warnings=()) if isinstance(outcome, Event) else outcome)


@PROPERTY
@given(order_lives(), modes)
def test_watching_rules_never_change_a_decision_and_warn_exactly_where_enforcing_would_refuse(
        workload: list[Command], chosen: dict[tuple[str, int], str]) -> None:
    """Under a document with some rules in warn or audit mode, every decision is the one the document without them
    makes (byte for byte, the warnings aside); an accepted command's first warning names the rule that refuses it
    when they all enforce, and one without warnings is accepted then too."""
    watching, absent, enforcing = _compiled(frozenset(chosen.items()))
    names = {f"order:{ORDER_RULES['types']['order'][k][i]['name']}": mode for (k, i), mode in chosen.items()}
    states: dict[str, ObjectState | None] = {}
    for cmd in workload:
        before = states.get(cmd.object_id)
        decision = decide(before, cmd, rules=watching)
        other = decide(before, cmd, rules=absent)
        assert _plain(decision.outcome) == _plain(other.outcome)
        assert (codec.encode_state(decision.state) if decision.state else None) == \
            (codec.encode_state(other.state) if other.state else None)
        outcome = decision.outcome
        if isinstance(outcome, Event):
            assert all(names.get(w.rule) == w.mode for w in outcome.warnings), outcome.warnings
            strict = decide(before, cmd, rules=enforcing).outcome
            if outcome.warnings:
                first = outcome.warnings[0]
                assert isinstance(strict, Rejection) and (strict.rule, strict.rule_message) == \
                    (first.rule, first.message)
            else:
                assert isinstance(strict, Event) and _plain(strict) == _plain(outcome)
        states[cmd.object_id] = decision.state


WARNED = RuleWarning("order:finance-approves-large", "warn", "RULE_VIOLATED", 'approval needs "finance" – ask',
                     ("/amount", "/status"))
AUDITED = RuleWarning("order:customer-immutable", "audit", "RULE_VIOLATED", "customer never changes", ("/customer",))


def _event(*warnings: RuleWarning) -> Event:
    return Event("e1", EventType.UPDATED, "o1", 3, "c2", "alice", T0, "alice", patch="{}", object_type="order",
                 rules_version=3, warnings=warnings)


def test_the_http_answer_names_warn_mode_warnings_and_keeps_audit_mode_ones_in_the_event() -> None:
    summary = summarize(_event(AUDITED, WARNED))
    assert summary is not None and summary.warnings == (WARNED,)
    cmd = UpdateObject("c2", "o1", "alice", T0, patch="{}")
    answer = decided(cmd, 3, "UPDATED", summary, {})
    assert answer.headers["warning"] == \
        '299 arbiter "order:finance-approves-large: approval needs \\"finance\\" \\u2013 ask"'
    body = json.loads(answer.body)
    assert body["warnings"] == [{"rule": WARNED.rule, "reason": "RULE_VIOLATED", "message": WARNED.message,
                                 "pointers": ["/amount", "/status"]}]
    quiet = summarize(_event(AUDITED))
    assert quiet is not None and quiet.warnings == ()
    answer = decided(cmd, 3, "UPDATED", quiet, {})
    assert "warning" not in answer.headers and "warnings" not in json.loads(answer.body)
    gone = decided(DeleteObject("c3", "o1", "alice", T0), 4, "DELETED", summarize(_event(WARNED)), {})
    assert gone.status_code == 204 and gone.headers["warning"].startswith("299 arbiter ")  # no body: the header


def test_metrics_and_the_status_page_count_would_be_refusals_per_rule_version_and_mode() -> None:
    m = ApiMetrics()
    for o in (_event(WARNED, AUDITED), _event(WARNED), _event()):
        m.outcome(o, 1)
    text = m.render().decode()
    assert 'arbiter_api_rule_warnings_total{mode="warn",rule="order:finance-approves-large",rules_version="3"} 2.0' \
        in text
    assert 'arbiter_api_rule_warnings_total{mode="audit",rule="order:customer-immutable",rules_version="3"} 1.0' \
        in text
    status = StatusCollector(Settings(partitions=2))
    for o in (_event(WARNED, AUDITED), _event(WARNED)):
        status.observe(o, 0)
    assert dict(status.rule_warnings) == {"order:finance-approves-large (v3, warn)": 2,
                                          "order:customer-immutable (v3, audit)": 1}


def test_an_outcome_read_after_a_202_names_the_rules_version_and_the_warnings(tmp_path: Any) -> None:  # noqa: ANN401
    """A ``Prefer: wait`` that ran out answers 202; the client then reads ``GET /commands/{id}``, which must say
    what the write's answer would have: the rules version (``Arbiter-Rules-Version``) and warn-mode warnings (the
    scenario's table showed ``1`` for ``1 (rules v1)`` when the wait ran out on a loaded machine)."""
    from fastapi.testclient import TestClient

    from app.api.callers.identity import dev_token
    from app.api.deps import ApiContext
    from app.api.main import create_app

    s = Settings(var_dir=tmp_path / "var")
    app = create_app(s)
    app.state.ctx = ApiContext(s, None, app.state.outcomes, app.state.metrics, app.state.quotas)  # type: ignore[arg-type]
    app.state.outcomes.offer(_event(WARNED))
    alice = {"Authorization": f"Bearer {dev_token(s, 'alice', ttl_s=60)}"}
    r = TestClient(app).get("/commands/c2", headers=alice)
    assert r.status_code == 200 and r.json()["status"] == "accepted", r.text
    assert r.headers["Arbiter-Rules-Version"] == "3" and r.headers["warning"].startswith("299 arbiter ")
    untyped = replace(_event(), command_id="c3", rules_version=None)
    app.state.outcomes.offer(untyped)
    assert "Arbiter-Rules-Version" not in TestClient(app).get("/commands/c3", headers=alice).headers
