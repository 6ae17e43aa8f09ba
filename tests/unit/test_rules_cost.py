"""What a guard may cost (commands.rules.cost): the runtime budget on every path, the deploy's worst case, cel-cpp's
iteration budget matched by the Python translation, and the checks that read cel-cpp's AST rather than the text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.rules.deploy import check
from commands import CreateObject, Rejection, decide
from commands.errors import ReasonCode
from commands.rules import RuleSet, RulesInvalid
from commands.rules.bounds import CEL_MAX_ITERATIONS, MAX_GUARD_COST
from commands.rules.cost import over_budget
from tests.unit.rules_support import T0, with_rules

pytestmark = pytest.mark.unit

QUADRATIC = "command.document.items.all(x, x in command.document.catalog)"


def rules_with(*exprs: str) -> dict[str, Any]:
    return {"rules": 1, "types": {"t": {"guards": [{"name": f"g{i}", "expr": e, "message": "no"}
                                                   for i, e in enumerate(exprs)]}}}


def create(rules: RuleSet, document: dict[str, Any]) -> Rejection | None:
    outcome = decide(None, CreateObject("c1", "o1", "alice", T0, document=json.dumps(document), object_type="t"),
                     rules=rules).outcome
    return outcome if isinstance(outcome, Rejection) else None


def cel_only(rules: RuleSet) -> RuleSet:
    """The same rules with the Python translation switched off: cel-cpp decides every guard."""
    for t in rules.types.values():
        t.in_python.clear()
    return rules


def catalog(n: int, m: int) -> dict[str, Any]:
    names = [f"c{i:04d}" for i in range(m)]
    return {"items": names[:n], "catalog": names}


@pytest.mark.parametrize("expr", [QUADRATIC, "command.document.items.all(x, 'c0001' in command.document.catalog)"])
@pytest.mark.parametrize("path", ["python", "cel-cpp"])
def test_a_quadratic_guard_over_the_budget_is_rule_error_naming_it_on_every_path(path: str, expr: str) -> None:
    rules = with_rules(rules_with("true", expr))
    assert rules.types["t"].in_python["create"] is not None  # the Python translation would answer it
    if path == "cel-cpp":
        rules = cel_only(rules)
    small = create(rules, catalog(50, 50))
    assert small is None  # 50 x 50: well within the budget, evaluated
    # 2,000 small items (weight 2,001) x a 5,000-name catalog (weight 30,001): about 6 x 10^7, the catalog's scans
    big = create(rules, {"items": list(range(2000)), "catalog": catalog(0, 5000)["catalog"]})
    assert big is not None and big.reason is ReasonCode.RULE_ERROR and big.rule == "t:g1", big
    assert "budget" in (big.rule_message or "")


def test_the_budget_holds_at_its_bound_and_refuses_one_past() -> None:
    def costs(*values: int) -> list[Any]:
        return [lambda w, v=v: v for v in values]

    assert over_budget(costs(MAX_GUARD_COST), {}) is None
    assert over_budget(costs(MAX_GUARD_COST + 1), {}) == (0, MAX_GUARD_COST + 1)
    assert over_budget(costs(MAX_GUARD_COST - 1, 1), {}) is None
    assert over_budget(costs(MAX_GUARD_COST - 1, 2), {}) == (1, MAX_GUARD_COST + 1)  # the guard that passes it


def test_a_guard_whose_worst_case_is_over_the_budget_is_refused_at_deploy() -> None:
    with pytest.raises(RulesInvalid) as refused:
        check(json.dumps(rules_with("true", QUADRATIC)))
    assert any(p.startswith("/types/t/guards/1/expr:") and "budget" in p for p in refused.value.problems), \
        refused.value.problems
    check(json.dumps(rules_with("command.document.items.all(x, x != '')", "'a' in command.document.tags",
                                "caller.groups.exists(g, g in state.editors)")))  # linear, or bounded inputs


@pytest.mark.parametrize("path", ["python", "cel-cpp"])
@pytest.mark.parametrize(("n", "accepted"), [(CEL_MAX_ITERATIONS - 1, True), (CEL_MAX_ITERATIONS, False)])
def test_the_iteration_budget_is_cel_cpps_on_every_path(path: str, n: int, accepted: bool) -> None:
    """cel-cpp evaluates 9,999 iterations and refuses the 10,000th; Python answers the first and defers the second."""
    rules = with_rules(rules_with("command.document.items.all(x, x >= 0)"))
    assert rules.types["t"].in_python["create"] is not None
    if path == "cel-cpp":
        rules = cel_only(rules)
    outcome = create(rules, {"items": list(range(n))})
    if accepted:
        assert outcome is None
    else:
        assert outcome is not None and outcome.reason is ReasonCode.RULE_ERROR and outcome.rule == "t:g0"
        assert "Iteration budget exceeded" in (outcome.rule_message or "")


def test_each_guard_of_a_chain_has_its_own_iteration_budget() -> None:
    """Two guards of 6,000 iterations each pass one by one; chained into one cel-cpp program they shared a budget."""
    rules = cel_only(with_rules(rules_with("command.document.items.all(x, x >= 0)",
                                           "command.document.items.exists(x, x < 0) == false")))
    assert rules.types["t"].by_kind["create"][0][1] is not None  # they are chained
    assert create(rules, {"items": list(range(6000))}) is None


@pytest.mark.parametrize(("expr", "words"), [
    ("true // '''\n&& command.document.items.all(x, command.document.catalog.exists(c, c == x)) // '''", "nested"),
    ("true // '''\n&& state.colour == 1 // '''", "state.colour: unknown field"),
    ("true // '''\n&& caller.groups.map(g, g).size() > 0 // '''", "map() macro"),
    ("true // '''\n&& caller.groups.filter(g, g == 'a').size() > 0 // '''", "filter() macro"),
    ("true // '''\n&& caller.groups.map(g, g != '', g + 'x').size() > 0 // '''", "map() macro"),
    ("true // '''\n&& next['x'] == 1 // '''", "not indexed"),
])
def test_a_comment_hides_nothing_from_the_compile_time_checks(expr: str, words: str) -> None:
    with pytest.raises(RulesInvalid) as refused:
        with_rules(rules_with(expr))
    assert any(words in p for p in refused.value.problems), refused.value.problems


def test_a_comprehension_variable_named_like_a_variable_is_not_a_read() -> None:
    rules = with_rules(rules_with("caller.groups.all(caller, caller != '')"))
    assert rules.types["t"].reads["caller"] == ("groups",)
    assert create(rules, {}) is None


def test_the_docs_say_the_bounds_through_generated_names() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "concepts" / "rules.md").read_text("utf-8")
    for name in ("MAX_GUARD_COST", "CEL_MAX_ITERATIONS", "MAX_DOCUMENT_DEPTH", "PRECHECK_DEADLINE_S"):
        assert "{{gen rules." + name + "}}" in page, name
    assert f"{MAX_GUARD_COST:,}" not in page  # (10,000 is in the worked example: an amount, not the budget)


def test_the_uniform_cap_is_the_largest_weight_within_the_budget() -> None:
    """decide prices a command exactly only when a weight passes the cap: at the cap the guards fit, one past they
    do not (so the shortcut never lets through what the exact price would refuse)."""
    rules = with_rules(rules_with(QUADRATIC, "caller.groups.exists(g, g == 'x')"))
    t = rules.types["t"]
    names = [key for key, *_ in t.weighed]
    cap = t.cost_caps["create"]

    def at(k: int) -> dict[str, int]:
        return {n: k for name in names for n in (name, name + "#")}

    costs = [g.cost for g in t.guards]
    assert 1 < cap < MAX_GUARD_COST
    assert over_budget(costs, at(cap)) is None and over_budget(costs, at(cap + 1)) is not None
