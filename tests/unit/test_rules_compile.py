"""Rules documents: parsing, the published JSON Schema, canonical text and digest, and what compiling refuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from commands.rules import RulesInvalid, canonical_rules, compile_rules, rules_digest
from commands.rules.bounds import MAX_EXPRESSION_CHARS, MAX_EXPRESSION_DEPTH
from commands.rules.expression import text_problems
from commands.rules.meta_schema import published_text
from tests.unit.rules_support import ORDERS, orders

pytestmark = pytest.mark.unit

PUBLISHED = Path(__file__).resolve().parents[2] / "schemas" / "rules.schema.json"
BASE: dict[str, Any] = {"rules": 1, "types": {"t": {"tracked": {"status": "/status", "n": "/n"}}}}


def problems_of(document: dict[str, Any] | str) -> tuple[str, ...]:
    text = document if isinstance(document, str) else json.dumps(document)
    with pytest.raises(RulesInvalid) as err:
        compile_rules(text, version=1)
    assert err.value.code == "RULES_INVALID" and err.value.problems
    return err.value.problems


def with_type(**spec: Any) -> dict[str, Any]:  # noqa: ANN401
    doc = copy.deepcopy(BASE)
    doc["types"]["t"].update(spec)
    return doc


def guard(expr: str, **more: Any) -> dict[str, Any]:  # noqa: ANN401
    return with_type(guards=[{"name": "g", "expr": expr, "message": "no", **more}])


def test_the_published_schema_is_generated_from_the_code() -> None:
    assert PUBLISHED.read_text("utf-8") == published_text()


def test_the_example_compiles_and_its_canonical_text_is_json_with_a_stable_digest() -> None:
    rules = orders(version=7)
    assert rules.version == 7
    assert rules.document == canonical_rules(ORDERS.read_text("utf-8"))
    assert rules.digest == rules_digest(rules.document) and rules.digest.startswith("sha256:")
    assert json.loads(rules.document)["types"]["order"]["tracked"] == {"status": "/status", "amount": "/amount",
                                                                       "customer": "/customer"}
    # YAML and the canonical JSON compile to the same document; re-canonicalising is the identity
    assert canonical_rules(rules.document) == rules.document
    assert compile_rules(rules.document, version=7).digest == rules.digest
    assert set(rules.types) == {"order", "ticket"}


@pytest.mark.parametrize(("text", "where"), [
    ("rules: 1\ntypes: [", "(document)"),
    ("[1, 2]", "/"),
    ("rules: 2\ntypes: {}", "/rules"),
    ("rules: 1\ntypes: {}\nextra: 1", "/"),
    ("rules: 1\ntypes:\n  t:\n    tracked: {s: status}", "/types/t/tracked/s"),  # not a pointer
    ("rules: 1\ntypes:\n  '9t': {}", "/types"),  # not a name
    ("rules: 1\ntypes:\n  t:\n    guards: [{name: g, expr: 'true'}]", "/types/t/guards/0"),  # no message
    ("rules: 1\ntypes: {t: {}}\ndescription: 2025-01-01", "/description"),  # a YAML date is not JSON
    ("rules: 1\ntypes:\n  t:\n    tracked: {1: /a}", "/types/t/tracked"),  # a YAML int key
    (b"\xff\xfe", "(document)"),
])
def test_a_malformed_document_is_refused_with_a_pointer(text: str | bytes, where: str) -> None:
    with pytest.raises(RulesInvalid) as err:
        canonical_rules(text)
    assert any(p.startswith(where) for p in err.value.problems), err.value.problems


@pytest.mark.parametrize(("document", "where", "words"), [
    (guard("next.status =="), "/types/t/guards/0/expr", "Syntax error"),
    (guard("nxt.status == 'a'"), "/types/t/guards/0/expr", "undeclared reference"),
    (guard("next.missing == 1"), "/types/t/guards/0/expr", "next.missing: unknown field"),
    (guard("state.colour == 1"), "/types/t/guards/0/expr", "state.colour: unknown field"),
    (guard("caller.email == ''"), "/types/t/guards/0/expr", "caller.email: unknown field"),
    (guard("next['status'] == 'a'"), "/types/t/guards/0/expr", "not indexed"),
    (guard("next.n + 1"), "/types/t/guards/0/expr", "not bool"),
    (guard("caller.groups.map(g, g).size() > 0"), "/types/t/guards/0/expr", "map() macro"),
    (guard("caller.groups.all(g, caller.groups.exists(h, h == g))"), "/types/t/guards/0/expr", "nested"),
    (guard("(" * (MAX_EXPRESSION_DEPTH + 1) + "true" + ")" * (MAX_EXPRESSION_DEPTH + 1)),
     "/types/t/guards/0/expr", "deeper"),
    (guard("true" + " && true" * (MAX_EXPRESSION_CHARS // 8)), "/types/t/guards/0/expr", "true && true"),  # too long
    (with_type(tracked={"version": "/v"}), "/types/t/tracked/version", "member of state"),
    (with_type(tracked={"a": "/x", "b": "/x"}), "/types/t/tracked/b", "tracked as a too"),
    (with_type(transitions=[{"name": "m", "field": "colour", "allowed": {"a": []}}]), "/types/t/transitions/0/field",
     "not a tracked field"),
    (with_type(transitions=[{"name": "m", "field": "status", "allowed": {"a": ["b"]}}]),
     "/types/t/transitions/0/allowed/a/0", "not a key"),
    (with_type(transitions=[{"name": "m", "field": "status", "initial": ["z"], "allowed": {"a": []}}]),
     "/types/t/transitions/0/initial/0", "not a key"),
    (with_type(transitions=[{"name": "g", "field": "status", "allowed": {"a": []}}],
               guards=[{"name": "g", "expr": "true", "message": "m"}]), "/types/t/guards/0/name", "another rule"),
    (guard("true") | {"types": {"t": {"guards": [{"name": "create_schema", "expr": "true", "message": "m"}]}}},
     "/types/t/guards/0/name", "built-in"),
    (with_type(create_schema={"type": "nope"}), "/types/t/create_schema", "not a usable JSON Schema"),
    (with_type(patch_schema={"$ref": "https://example.com/s.json"}), "/types/t/patch_schema", "not fetched"),
    (with_type(create_schema={"$schema": "http://json-schema.org/draft-07/schema#"}), "/types/t/create_schema/$schema",
     "2020-12"),
    (with_type(create_schema={"pattern": "(a)\\1"}), "/types/t/create_schema", "not a usable"),  # backtracking regex
])
def test_a_rule_that_cannot_be_compiled_is_refused_with_its_pointer(document: dict[str, Any], where: str,
                                                                     words: str) -> None:
    problems = problems_of(document)
    assert any(p.startswith(where + ":") and words in p for p in problems), problems


def test_an_expression_at_its_length_bound_compiles_and_one_more_character_is_refused() -> None:
    at_bound = "true" + " " * (MAX_EXPRESSION_CHARS - 4)
    compile_rules(json.dumps(guard(at_bound)), version=1)
    assert text_problems(at_bound + " ") == [f"expression is longer than {MAX_EXPRESSION_CHARS} characters"]
    problems_of(guard(at_bound + " "))


def test_string_literals_are_not_read_as_references() -> None:
    compile_rules(json.dumps(guard("'next.colour state[x] .map(' != next.status")), version=1)


def test_a_comprehension_beside_another_and_a_version_below_one() -> None:
    compile_rules(json.dumps(guard("caller.groups.all(g, g != '') && caller.groups.exists(g, g == 'x')")), version=1)
    with pytest.raises(RulesInvalid):
        compile_rules(json.dumps(BASE), version=0)


def test_a_rule_set_pickles_as_its_document_and_version_and_decides_alike_after() -> None:
    import pickle

    from tests.unit.rules_support import create_order, update

    rules = orders(version=4)
    back = pickle.loads(pickle.dumps(rules))  # Spark ships what a task uses by pickle
    assert (back.version, back.digest, back.document) == (rules.version, rules.digest, rules.document)
    state = create_order(back).state
    assert state is not None and state == create_order(rules).state
    assert update(state, {"status": "approved"}, back).outcome.rule == "order:status-flow"  # type: ignore[union-attr]


def test_the_rule_names_are_what_rejections_can_name() -> None:
    assert orders().rule_names() == (
        "types", "order:create_schema", "order:patch_schema", "order:max_tracked_bytes", "order:status-flow",
        "order:finance-approves-large", "order:customer-immutable", "ticket:create_schema",
        "ticket:max_tracked_bytes", "ticket:at-most-20-watchers")
