"""Guards in Python (commands.rules.python_guards) against cel-cpp: wherever Python answers, it is cel-cpp's answer.

Generated guard expressions over generated variable values (every JSON kind, integers past 64 bits, non-ASCII and
non-Unicode strings) are evaluated both ways; Python may defer (raise ``Defer``), never differ. Then whole
workloads under the example rules decide byte for byte as with cel-cpp alone, and the benchmark's realistic guards
really run in Python (so the speed-up cannot silently vanish).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from commands import Command
from commands.rules.expression import compile_guard, new_environment, references
from commands.rules.python_guards import Defer, translate
from commands.rules.ruleset import RuleSet
from tests.unit.rules_support import with_rules
from tests.unit.test_rules_properties import RULES as ORDERS
from tests.unit.test_rules_properties import commands as workloads
from tests.unit.test_rules_properties import run

pytestmark = pytest.mark.unit

ENV = new_environment()
POINTERS = {"a": "/a", "b": "/b"}
VARIABLES = ("next.a", "next.b", "state.a", "state.owner", "state.exists", "state.version", "caller.principal",
             "caller.groups", "command.kind", "command.expected_version")
LITERALS = ("1", "0", "-2", "2.5", "1.0", "'x'", "'y'", "'é'", "''", "true", "false", "null", "[1, 'x']",
            "['x', 'y']", "[]", "[null, 2.5, true]", "{'k': 1}")
UNARY = ("!{}", "size({})", "{}.size()", "{}[0]", "{}['k']", "{}.k", "has({}.k)", "-{}", "{}.exists(x, x == 'x')",
         "{}.all(x, x > 0)", "{}.exists(x, x)", "{}.all(k, k in ['x', 'k'])")
BINARY = ("{} == {}", "{} != {}", "{} < {}", "{} <= {}", "{} > {}", "{} >= {}", "{} in {}", "{} && {}", "{} || {}",
          "{} == {}", "{} != {}", "{} in {}", "{} < {}", "{} >= {}",
          "{}.startsWith({})", "{}.endsWith({})", "{}.contains({})", "{} + {}")


def expressions() -> st.SearchStrategy[str]:
    leaves = st.sampled_from(VARIABLES + LITERALS)
    return st.recursive(leaves, lambda inner: st.one_of(
        st.builds(lambda f, a: "(" + f.format(a) + ")", st.sampled_from(UNARY), inner),
        st.builds(lambda f, a, b: "(" + f.format(a, b) + ")", st.sampled_from(BINARY), inner, inner),
        st.builds(lambda c, a, b: f"({c} ? {a} : {b})", inner, inner, inner)), max_leaves=6)


simple = (st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from((1.0, 2.5, -0.0))
          | st.sampled_from(("x", "y", "", "é")))
odd = st.sampled_from((2**63 - 1, -(2**63), 2**63, 2**70, "\ud800", "x\ud800"))  # at or past what CEL takes
values = st.one_of(simple, simple, simple, simple, st.lists(simple, max_size=3),
                   st.dictionaries(st.sampled_from(("k", "x")), simple, max_size=2), odd,
                   st.lists(st.lists(simple, max_size=2) | odd, max_size=2))


def cel_outcome(program: Any, data: dict[str, Any]) -> Any:  # noqa: ANN401
    """Return True/False for a bool result, else a marker that it was not one (an error, another type)."""
    from cel_expr_python import cel

    try:
        result = program.eval(data=data)
    except Exception:  # noqa: BLE001 - a value CEL cannot take
        return "error"
    if result.type() == cel.Type.BOOL:
        return result.value()
    return "not a bool"


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(expressions(), values, values, values, st.sampled_from(("alice", "bob", "é")), st.booleans(),
       st.lists(st.sampled_from(("x", "finance", "é")), max_size=2), st.none() | st.integers(0, 3))
def test_python_answers_as_cel_cpp_or_defers(expr: str, a: Any, b: Any, old_a: Any, owner: str, exists: bool,  # noqa: ANN401
                                             groups: list[str], expected: int | None) -> None:
    assume(check(expr, a, b, old_a, owner, exists, groups, expected) is not None)


@cache
def _compiled(expr: str) -> tuple[Any, dict[str, tuple[str, ...]], Any] | None:
    """Return ``expr``'s cel-cpp program, what it reads and its Python translation, or None when it is not a guard or
    not translated. Pure in ``expr``, so built once per expression rather than once per example (Hypothesis draws
    the same expression with many values; the compile was most of the 1,000-example test's time)."""
    program, tree, problems = compile_guard(ENV, expr, tuple(POINTERS))
    if problems or program is None or tree is None:
        return None
    read = references(tree) | {("next", "b")}  # b is read by another guard of the type: it must convert too
    reads = {var: tuple(sorted(m for v, m in read if v == var)) for var in ("state", "next", "command", "caller")}
    run = translate([program], reads, "t", POINTERS)
    return None if run is None else (program, reads, run)


def check(expr: str, a: Any, b: Any, old_a: Any, owner: str = "alice", exists: bool = True,  # noqa: ANN401, PLR0913
          groups: list[str] | None = None, expected: int | None = None) -> bool | None:
    """Assert Python's answer for ``expr`` is cel-cpp's, or that Python defers; return whether Python answered
    (None: ``expr`` is not a guard, or not translated)."""
    groups = groups if groups is not None else ["finance"]
    compiled = _compiled(expr)
    if compiled is None:
        return None
    program, reads, run = compiled
    live = SimpleNamespace(owner=owner, deleted=False, version=3, editors=(), readers=(), object_type="t") \
        if exists else None
    command = SimpleNamespace(principal="alice", groups=tuple(groups), issuer=None, command_id="c1", object_id="o1",
                              expected_version=expected)
    old, new = {"/a": old_a}, {"/a": a, "/b": b}
    state = {"a": old_a, "owner": owner if exists else "", "exists": exists, "version": 3 if exists else 0}
    data = {"state": {m: state[m] for m in reads["state"]}, "next": {m: new["/" + m] for m in reads["next"]},
            "command": {m: {"kind": "update", "expected_version": expected}[m] for m in reads["command"]},
            "caller": {m: {"principal": "alice", "groups": groups}[m] for m in reads["caller"]}}
    try:
        index = run(old, new, live, command, "update", None)
    except Defer:
        return False
    assert cel_outcome(program, data) is (index < 0), (expr, data)
    return True


@pytest.mark.parametrize(("expr", "a", "b"), [
    ("next.a == true", 1, None), ("next.a == true", 1.0, None), ("next.a != false", 0, None),
    ("next.a == null", False, None), ("next.a == 1", True, None), ("next.a == 'x'", ["x"], None),
    ("next.a == next.b", 1, True), ("next.a == next.b", "x", None), ("next.a == next.b", [1], "x"),
    ("next.a < 1", 1, None), ("next.a <= 1", 1, None), ("next.a > 'x'", "x", None), ("next.a >= 2.5", 2.5, None),
    ("next.a < next.b", False, True), ("next.a < next.b", "é", "z"),
    ("next.a in [true]", 1, None), ("next.a in [1]", True, None), ("next.a in ['x']", "x", None),
    ("true in next.a", [1], None), ("null in next.a", [None], None), ("'k' in next.a", {"k": 1}, None),
    ("next.a == 1", 2**64, None), ("next.a != 1", 2**63, None), ("next.a == 'x'", "x\ud800", None),
    ("size(next.a) > 0", [2**70], None), ("next.a == 1", 1, 2**64), ("next.a == 1", 1, 2**63),
    ("next.a == 1", 1, "\ud800"), ("next.a == 1", 1, [2**70]),
    ("size(next.a) == 2", "é", None), ("next.a[1] == 2", [1, 2], None), ("next.a.k == 1", {"k": 1}, None),
    ("has(next.a.k)", {"k": None}, None), ("next.a.startsWith('x')", "xy", None),
    ("!(next.a == 'x') ? next.b : true", "y", False), ("next.a && next.b", True, False),
    ("next.a || next.b", False, True), ("next.a.exists(x, x == 2)", [1, 2], None),
    ("next.a.exists(x, x == 2)", [1, "x"], None), ("next.a.all(x, x > 0)", [1, 2], None),
    ("next.a.all(x, x > 0)", [1, -1], None), ("next.a.all(x, x > 0)", [], None), ("next.a.exists(x, x)", [], None),
    ("next.a.exists(k, k == 'x')", {"x": 1}, None), ("next.a.all(k, k == 'x')", {"x": 1, "y": 2}, None),
    ("next.a.exists(x, x)", [False, True], None), ("next.a.exists(x, x == 'x')", "x", None)])
def test_edges_python_answers_as_cel_cpp(expr: str, a: Any, b: Any) -> None:  # noqa: ANN401
    assert check(expr, a, b, None) is not None, "not a translated guard"


def test_what_is_not_translated_stays_with_cel_cpp() -> None:
    """Timestamps, arithmetic, regexes and comprehensions are cel-cpp's alone: no Python run for them."""
    for expr in ("command.issued_at > timestamp('2025-01-01T00:00:00Z')", "next.a + 1 > 2", "next.a.matches('^x')",
                 "caller.groups.exists_one(g, g == 'x')"):
        program, tree, why = compile_guard(ENV, expr, tuple(POINTERS))
        assert not why and tree is not None, why
        read = references(tree)
        reads = {var: tuple(sorted(m for v, m in read if v == var)) for var in ("state", "next", "command", "caller")}
        assert translate([program], reads, "t", POINTERS) is None, expr


def test_the_benchmarks_realistic_guards_run_in_python() -> None:
    from bench.domain_rules import REALISTIC, setting
    from commands.rules.evaluate import decode_tracked, patched_value

    rules = with_rules(REALISTIC)
    state, cmd = setting(rules)
    order = rules.types["order"]
    old = decode_tracked(state.tracked)
    patch = json.loads(cmd.patch)
    new = {ptr: patched_value(old.get(ptr), tokens, patch) for _, ptr, tokens in order.tracked}
    run = order.in_python["update"]
    assert run is not None
    assert run(old, new, state, cmd, "update", patch) == -1  # answered, not deferred: all five guards pass


def test_the_benchmarks_heavy_guards_are_translated() -> None:
    """Its 32 guards each hold an ``exists`` over the caller's groups: comprehensions are translated too."""
    from bench.domain_rules import heavy

    assert with_rules(heavy()).types["order"].in_python["update"] is not None


def without_python(rules: RuleSet) -> RuleSet:
    """Return ``rules`` compiled again with every guard left to cel-cpp (the decisions of before this module)."""
    again = RuleSet(rules.version, rules.digest, rules.document)
    for name, type_rules in again.types.items():
        again.types[name] = replace(type_rules, in_python={})
    return again


HEAVY_GUARDS = with_rules({"rules": 1, "types": {"order": {
    "tracked": {"status": "/status", "amount": "/amount", "customer": "/customer", "priority": "/priority"},
    "guards": [
        {"name": "finance", "message": "m", "expr": "!(next.status == 'approved' && state.status != 'approved' && "
                                                    "next.amount > 10000) || 'finance' in caller.groups"},
        {"name": "customer", "message": "m", "expr": "next.customer == state.customer"},
        {"name": "amount", "message": "m", "kinds": ["update", "delete"],
         "expr": "state.status == 'draft' || next.amount <= state.amount"},
        {"name": "priority", "message": "m", "expr": "next.priority != 5 || state.owner == caller.principal"},
        {"name": "closed", "message": "m", "expr": "!(state.status in ['approved', 'rejected']) || "
                                                   "next.status == state.status"},
        {"name": "sized", "message": "m", "expr": "size(caller.groups) < 3 || state.exists"},
        {"name": "typed", "message": "m", "kinds": ["create", "update", "grant_editor"],
         "expr": "command.kind != 'create' || next.amount >= 0.5"}]}}})


@pytest.fixture(scope="module")
def cel_alone() -> list[tuple[RuleSet, RuleSet]]:
    """Each rules set beside itself compiled with every guard left to cel-cpp: parsed and compiled once for the
    module, not once per example (it was most of the generated workloads' time)."""
    return [(rules, without_python(rules)) for rules in (ORDERS, HEAVY_GUARDS)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(typed=True))
def test_workloads_decide_byte_for_byte_as_with_cel_cpp_alone(cel_alone: list[tuple[RuleSet, RuleSet]],
                                                              workload: list[Command]) -> None:
    for rules, alone in cel_alone:
        assert run(workload, rules) == run(workload, alone)
