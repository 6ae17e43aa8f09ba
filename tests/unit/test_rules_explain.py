"""``decide``'s tracing hook and the explanation built on it (issue 52 "Explain"); guards' message expressions."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands import Command, Event, ObjectState, Rejection, decide
from commands.rules import RulesInvalid
from commands.rules.explain import explain
from commands.rules.trace import REFUSED, RESULTS, WARNED, RuleTrace
from schemas import codec
from tests.unit.rules_support import create_order, orders, update, with_rules
from tests.unit.test_rules_modes import RULES as MODED_RULES
from tests.unit.test_rules_modes import moded
from tests.unit.test_rules_properties import commands

pytestmark = pytest.mark.unit

ORDER_RULES = json.loads(orders().document)


def _limits() -> Any:  # noqa: ANN401
    from commands.state import DEFAULT_LIMITS

    return DEFAULT_LIMITS


def _submitted(rules: Any, amount: int = 20000) -> ObjectState:  # noqa: ANN401
    created = create_order(rules, amount=amount)
    assert created.state is not None
    submitted = update(created.state, {"status": "submitted"}, rules)
    assert submitted.state is not None
    return submitted.state


def _command(state: ObjectState, patch: dict[str, Any], principal: str = "alice",
             groups: tuple[str, ...] = ()) -> Command:
    from datetime import timedelta

    from commands import UpdateObject
    from tests.unit.rules_support import T0

    return UpdateObject("explained", "o1", principal, T0 + timedelta(hours=1), patch=json.dumps(patch), groups=groups)


def test_an_accepted_update_is_explained_rule_by_rule_with_its_inputs() -> None:
    rules = orders(3)
    state = _submitted(rules)
    e = explain(state, _command(state, {"status": "approved"}, groups=("finance",)), _limits(), rules)
    d = e.as_dict()
    assert d["rules_version"] == 3 and d["outcome"]["status"] == "accepted"
    assert d["tracked"] == {"before": {"amount": 20000, "customer": "acme", "status": "submitted"},
                            "after": {"amount": 20000, "customer": "acme", "status": "approved"}}
    assert d["caller"]["groups"] == ["finance"]
    steps = [(s["rule"], s["result"]) for s in d["rules"]]
    assert steps == [("types", "passed"), ("order:patch_schema", "passed"), ("order:max_tracked_bytes", "passed"),
                     ("order:status-flow", "passed"), ("order:finance-approves-large", "passed"),
                     ("order:customer-immutable", "passed")]
    flow = d["rules"][3]
    assert flow["inputs"] == {"field": "status", "before": "submitted", "after": "approved"}
    guard = d["rules"][4]
    assert guard["inputs"] == {"caller.groups": ["finance"], "next.amount": 20000, "next.status": "approved",
                               "state.status": "submitted"}


def test_a_refused_update_names_the_refusing_rule_last_and_runs_none_after_it() -> None:
    rules = orders()
    state = _submitted(rules)
    e = explain(state, _command(state, {"status": "approved"}, groups=("sales",)), _limits(), rules)
    d = e.as_dict()
    assert d["outcome"]["status"] == "rejected" and d["outcome"]["rule"] == "order:finance-approves-large"
    last = d["rules"][-1]
    assert (last["rule"], last["result"], last["reason"]) == ("order:finance-approves-large", "refused",
                                                              "RULE_VIOLATED")
    assert last["message"] == "approval over 10,000 needs finance"
    assert "order:customer-immutable" not in [s["rule"] for s in d["rules"]]  # not run after the refusal


def test_a_transition_of_an_unchanged_field_and_a_guard_of_other_kinds_are_not_applicable() -> None:
    rules = orders()
    state = _submitted(rules)
    d = explain(state, _command(state, {"title": "seven chairs"}), _limits(), rules).as_dict()
    results = {s["rule"]: s["result"] for s in d["rules"]}
    assert results["order:status-flow"] == "not applicable"
    created = create_order(rules)
    trace = RuleTrace()
    from commands import CreateObject
    from tests.unit.rules_support import ORDER, T0

    decide(None, CreateObject("c2", "o2", "bob", T0, document=json.dumps(ORDER), object_type="order"), rules=rules,
           trace=trace)
    assert {s.rule: s.result for s in trace.steps}["order:finance-approves-large"] == "not applicable"  # update only
    assert created.accepted


def test_a_check_before_the_rules_is_said_to_have_decided() -> None:
    rules = orders()
    state = _submitted(rules)
    stale = replace(_command(state, {"status": "approved"}), expected_version=1)
    d = explain(state, stale, _limits(), rules).as_dict()
    assert d["outcome"]["reason"] == "VERSION_CONFLICT" and d["rules"] == [] and "before the rules" in d["note"]


def _with_message(expression: str) -> Any:  # noqa: ANN401
    doc = json.loads(json.dumps(ORDER_RULES))
    doc["types"]["order"]["guards"][0]["message_expression"] = expression
    return with_rules(doc)


def test_a_guard_message_expression_gives_the_refusal_its_text_over_the_same_variables() -> None:
    rules = _with_message("'approving ' + string(next.amount) + ' needs finance; ' + caller.principal + ' is not in it'")
    state = _submitted(rules, amount=60000)
    refused = update(state, {"status": "approved"}, rules)
    assert isinstance(refused.outcome, Rejection)
    assert refused.outcome.rule_message == "approving 60000 needs finance; alice is not in it"
    trace = RuleTrace()
    again = decide(state, _command(state, {"status": "approved"}), rules=rules, trace=trace)
    assert isinstance(again.outcome, Rejection)
    assert trace.steps[-1].message == again.outcome.rule_message == "approving 60000 needs finance; alice is not in it"


@pytest.mark.parametrize("expression", ["caller.issuer + ' is not finance'",  # null + string: no overload
                                        "caller.groups.exists(g, g == 'x') ? 'x' : ''"])  # an empty text
def test_a_message_expression_that_fails_falls_back_to_the_static_message(expression: str) -> None:
    rules = _with_message(expression)
    state = _submitted(rules, amount=60000)
    for _ in range(2):  # the same every time
        refused = update(state, {"status": "approved"}, rules)
        assert isinstance(refused.outcome, Rejection)
        assert refused.outcome.rule_message == "approval over 10,000 needs finance"


@pytest.mark.parametrize(("expression", "why"), [("1 + 1", "not string"), ("state.nope + ''", "nope")])
def test_a_message_expression_that_is_not_a_string_or_reads_an_unknown_member_is_refused(expression: str,
                                                                                        why: str) -> None:
    with pytest.raises(RulesInvalid) as e:
        _with_message(expression)
    assert any("/types/order/guards/0/message_expression" in p and why in p for p in e.value.problems)


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(commands(typed=True), st.dictionaries(st.sampled_from(MODED_RULES), st.sampled_from(("warn", "audit"))))
def test_the_trace_changes_no_decision_and_agrees_with_it(workload: list[Command],
                                                          chosen: dict[tuple[str, int], str]) -> None:
    """With the hook on, every decision is byte for byte the one without it; a rule's rejection is the trace's one
    refused step, last; an event's warnings are the trace's warned steps, in order."""
    rules = moded(chosen) if chosen else orders()
    states: dict[str, ObjectState | None] = {}
    for cmd in workload:
        before = states.get(cmd.object_id)
        trace = RuleTrace()
        traced = decide(before, cmd, rules=rules, trace=trace)
        plain = decide(before, cmd, rules=rules)
        assert codec.encode_outcome(traced.outcome) == codec.encode_outcome(plain.outcome)
        assert all(s.result in RESULTS for s in trace.steps)
        refused = [s for s in trace.steps if s.result == REFUSED]
        o = plain.outcome
        if isinstance(o, Rejection) and o.rule is not None:
            assert trace.ran and refused == [trace.steps[-1]]
            assert (refused[0].rule, refused[0].message, refused[0].reason) == (o.rule, o.rule_message, o.reason.value)
        elif isinstance(o, Rejection):
            assert not trace.ran
        else:
            assert isinstance(o, Event) and not refused
            warned = [(s.rule, s.mode, s.message) for s in trace.steps if s.result == WARNED]
            assert warned[:len(o.warnings)] == [(w.rule, w.mode, w.message) for w in o.warnings]
        states[cmd.object_id] = plain.state
