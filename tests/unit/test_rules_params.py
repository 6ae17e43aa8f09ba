"""Named parameters (``commands.rules.params``): guards read ``params.<name>``, a parameter change is a new version,
and a document with parameters decides exactly as the same document with the values written inline (issue 52)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.rules.deploy import check
from commands import CreateObject, Decision, ObjectState, Rejection, UpdateObject, decide
from commands.rules import RuleSet, RulesInvalid, compile_rules
from commands.rules.cases import run_cases
from commands.rules.document import parse_rules
from commands.rules.params import cel_literal, parameters_file, substitute, with_parameters
from tests.unit.rules_support import T0

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rules"
PARAMS_DOC = (EXAMPLES / "orders-params.yaml").read_text("utf-8")


def _inlined(limit: int) -> str:
    """Return the parameterised order example with ``limit`` written inline and no parameters at all."""
    value = parse_rules(PARAMS_DOC)
    del value["parameters"], value["parameter_schema"]
    guard = value["types"]["order"]["guards"][0]
    guard["expr"] = guard["expr"].replace("params.finance_limit", str(limit))
    guard["message_expression"] = guard["message_expression"].replace("params.finance_limit", str(limit))
    assert "params" not in json.dumps(value)
    return json.dumps(value)


@functools.lru_cache(maxsize=256)
def _inline_rules(limit: int, version: int) -> RuleSet:
    return compile_rules(_inlined(limit), version=version)


@functools.lru_cache(maxsize=256)
def _with_limit(limit: int, version: int = 1) -> RuleSet:
    return compile_rules(with_parameters(PARAMS_DOC, {"finance_limit": limit}), version=version)


def test_the_parameterised_example_passes_its_own_cases() -> None:
    report = run_cases(PARAMS_DOC)
    assert not report.failures and len(report.lines()) > 10
    check(PARAMS_DOC)  # deployable as written


def test_a_guard_reads_the_parameter_and_its_message_names_it() -> None:
    for limit, accepted in ((10000, False), (50000, True)):
        rules = _with_limit(limit)
        state = _run(rules, [("create", 20000, ()), ("update", "submitted", ())])
        last = _decide(rules, state, ("update", "approved", ()), 3)
        if accepted:
            assert last.accepted, last.outcome
        else:
            assert isinstance(last.outcome, Rejection) and last.outcome.rule == "order:finance-approves-large"
            assert last.outcome.rule_message == f"approval over {limit} needs finance"
    guard = _with_limit(10000).types["order"].guards[0]
    assert guard.params == (("finance_limit", "10000"),) and "> (10000)" in guard.text and "params" not in guard.text


def test_explain_lists_the_parameters_a_guard_read() -> None:
    from commands.rules.trace import RuleTrace

    rules = _with_limit(10000)
    state = _run(rules, [("create", 20000, ()), ("update", "submitted", ())])
    trace = RuleTrace()
    decision = decide(state, UpdateObject("u9", "o1", "alice", T0, patch=json.dumps({"status": "approved"})),
                      rules=rules, trace=trace)
    assert isinstance(decision.outcome, Rejection)
    [step] = [s for s in trace.steps if s.rule == "order:finance-approves-large"]
    assert step.inputs["params.finance_limit"] == 10000 and step.inputs["next.amount"] == 20000, step.inputs


def test_a_parameter_change_is_another_digest() -> None:
    assert _with_limit(10000).digest != _with_limit(10001).digest


def test_reading_an_undeclared_parameter_is_refused_at_compile_time() -> None:
    text = PARAMS_DOC.replace("next.amount > params.finance_limit", "next.amount > params.finance_cap")
    with pytest.raises(RulesInvalid) as refused:
        check(text)
    assert refused.value.problems == (
        "/types/order/guards/0/expr: params.finance_cap: no such parameter (declared: finance_limit)",)
    with pytest.raises(RulesInvalid) as whole:  # params is no variable: read it only as params.<name>
        check(PARAMS_DOC.replace("next.amount > params.finance_limit", "next.amount > params['finance_limit']"))
    assert any(p.startswith("/types/order/guards/0/expr:") and "params" in p for p in whole.value.problems), \
        whole.value.problems


def test_parameters_are_typed_by_the_parameter_schema() -> None:
    with pytest.raises(RulesInvalid) as refused:
        check(with_parameters(PARAMS_DOC, {"finance_limit": "ten thousand"}))
    assert refused.value.problems == ("/parameters/finance_limit: \"ten thousand\" is not of type \"integer\" "
                                      "(parameter_schema)",)
    with pytest.raises(RulesInvalid):
        check(with_parameters(PARAMS_DOC, {"finance_limit": 10000, "other": 1}))  # additionalProperties: false
    with pytest.raises(RulesInvalid):  # a parameter name is a CEL identifier (the published JSON Schema)
        check(with_parameters(PARAMS_DOC, {"finance-limit": 10000}))


def test_string_literals_and_comments_are_not_parameters() -> None:
    expr = "'params.x' == \"params.x\" && r'params.y' != '' // params.z\n && params.a > 1"
    out, names, problems = substitute(expr, {"a": 5})
    assert out == "'params.x' == \"params.x\" && r'params.y' != '' // params.z\n && (5) > 1"
    assert names == {"a"} and problems == []
    assert substitute("command.params.a == 1", {"a": 5})[0] == "command.params.a == 1"  # a member, not params


def test_a_parameters_file_holds_parameters_only() -> None:
    assert parameters_file((EXAMPLES / "orders-params-50000.yaml").read_text()) == {"finance_limit": 50000}
    for bad in ("finance_limit: 1", "parameters: 1", "parameters: {a: 1}\nrules: 1", "[1]"):
        with pytest.raises(RulesInvalid):
            parameters_file(bad)


def _guarded(expr: str, **params: Any) -> str:  # noqa: ANN401
    return json.dumps({"rules": 1, "parameters": params, "types": {"t": {"guards": [
        {"name": "g", "expr": expr, "message": "no"}]}}})


def test_a_parameter_is_priced_by_the_cost_budget_and_bounded_inline() -> None:
    """A parameter's literal is part of what the cost function prices: a loop over it comparing each element with
    a document's list is quadratic, refused as the same literal written inline would be."""
    check(_guarded("caller.groups.all(g, g in params.ok)", ok=["a"] * 600))  # the groups are bounded
    with pytest.raises(RulesInvalid) as refused:
        check(_guarded("params.ok.all(x, x in command.document.tags)", ok=["a"] * 600))
    assert any(p.startswith("/types/t/guards/0/expr:") and "budget" in p for p in refused.value.problems), \
        refused.value.problems
    with pytest.raises(RulesInvalid) as long:  # priced node by node: its text is bounded (3,300 nodes were a
        check(_guarded("params.ok == params.ok", ok=[0] * 1000))  # RecursionError in the cost function)
    assert long.value.problems == ("/types/t/guards/0/expr: with its parameters' values inline the expression "
                                   f"has {2 * (3 * 1000) + 2 + 4 + 2} characters, over 4096",)
    with pytest.raises(RulesInvalid) as deep:
        check(_guarded("params.v == 1", v=json.loads("[" * 17 + "]" * 17)))
    assert "nested deeper than 16" in deep.value.problems[0], deep.value.problems


#: Text a rules document may hold (YAML refuses raw control characters such as U+007F that JSON leaves unescaped).
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\n\t\"\\'"), max_size=8)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON)
def test_a_parameter_is_the_json_value_it_names(value: Any) -> None:  # noqa: ANN401
    """cel-cpp reads the literal a parameter becomes as the same value the command's document gives it."""
    doc = {"rules": 1, "parameters": {"v": value}, "types": {"t": {"guards": [
        {"name": "same", "expr": "command.document.v == params.v", "message": "differs"}]}}}
    text = json.dumps(doc, ensure_ascii=False)
    # the value as the document reads it: YAML 1.1 (PyYAML) reads JSON's 1e-05 as the string "1e-05", in any part
    # of a rules document; a parameter is what the document says
    value = parse_rules(text)["parameters"]["v"]
    rules = compile_rules(text, version=1)
    decision = decide(None, CreateObject("c", "o1", "alice", T0, document=json.dumps({"v": value}), object_type="t"),
                      rules=rules)
    assert decision.accepted, (cel_literal(value), decision.outcome)


Step = tuple[str, Any, tuple[str, ...]]


def _decide(rules: RuleSet, state: ObjectState | None, step: Step, n: int) -> Decision:
    kind, value, groups = step
    if kind == "create":
        doc = {"title": "t", "priority": 1, "customer": "acme", "amount": value, "status": "draft"}
        return decide(None, CreateObject(f"c{n}", "o1", "alice", T0, document=json.dumps(doc), object_type="order"),
                      rules=rules)
    return decide(state, UpdateObject(f"u{n}", "o1", "alice", T0, patch=json.dumps({"status": value}), groups=groups),
                  rules=rules)


def _run(rules: RuleSet, steps: list[Step]) -> ObjectState | None:
    state = None
    for n, step in enumerate(steps):
        d = _decide(rules, state, step, n)
        state = d.state
    return state


LIMITS = st.integers(1000, 1_000_000)
STEPS = st.lists(st.tuples(st.sampled_from(["submitted", "approved", "rejected", "draft"]),
                           st.sampled_from([(), ("finance",), ("ops",)])), max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=LIMITS, after=LIMITS, amount=st.integers(0, 2_000_000), steps=STEPS, data=st.data())
def test_a_parameter_deploy_at_n_decides_like_the_document_with_the_values_inlined(
        before: int, after: int, amount: int, steps: list[tuple[str, tuple[str, ...]]], data: st.DataObject) -> None:
    """Version 1 (limit ``before``) up to command N, version 2 (a parameter deploy: limit ``after``) from it on,
    decide every command, byte for byte, as versions 1 and 2 of the document with the limits written inline."""
    if data.draw(st.booleans(), label="at a limit"):  # the boundary, where an off-by-one would show
        amount = data.draw(st.sampled_from([before, before + 1, after, after + 1]), label="amount")
    stream: list[Step] = [("create", amount, ()), *[("update", s, g) for s, g in steps]]
    switch = data.draw(st.integers(0, len(stream)), label="N")
    params = (_with_limit(before, 1), _with_limit(after, 2))
    inline = (_inline_rules(before, 1), _inline_rules(after, 2))
    state_p: ObjectState | None = None
    state_i: ObjectState | None = None
    for n, step in enumerate(stream):
        which = 0 if n < switch else 1
        by_params = _decide(params[which], state_p, step, n)
        by_inline = _decide(inline[which], state_i, step, n)
        assert by_params == by_inline, (n, step)
        state_p, state_i = by_params.state, by_inline.state
