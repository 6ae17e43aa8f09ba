"""A rule's refusal over HTTP: the 422 problem names the rule, its message, pointers and rules version; the API's
advisory pre-check refuses a typed create the newest rules refuse, and leaves everything else to the validator."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.requests import Request

from app.api.problems import Rejected, arbiter_error
from app.api.rules import RulesView, precheck
from app.api.writes.summary import summarize
from app.rules.control import Deploy
from app.run.scenario import ORDERS, raised_limit
from app.settings import Settings
from commands import CreateObject, ReasonCode, Rejection, UpdateObject, decide
from commands.rules import canonical_rules, compile_rules, rules_digest

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, tzinfo=UTC)
DOC = canonical_rules(ORDERS.read_text())
ORDER = {"title": "Laptops", "priority": 2, "customer": "acme", "amount": 12000, "status": "draft"}


def view(document: str = DOC, version: int = 4) -> RulesView:
    v = RulesView(Settings())
    v.seen(Deploy(version, rules_digest(document), document, "ops", T0))
    asyncio.run(v.compiled_newest())  # compiled in the background: a pre-check before that is skipped
    return v


def create(doc: dict[str, object], object_type: str | None = "order") -> CreateObject:
    return CreateObject("c1", "o1", "alice", T0, document=json.dumps(doc), object_type=object_type)


def test_the_precheck_refuses_what_the_newest_rules_refuse_and_names_their_version() -> None:
    bad = asyncio.run(precheck(view(), create({**ORDER, "priority": 9})))
    assert bad is not None and bad.reason == ReasonCode.RULE_VIOLATED and bad.rules_version == 4
    assert asyncio.run(precheck(view(), create(ORDER))) is None  # allowed: produced, the validator decides
    assert asyncio.run(precheck(view(), create({**ORDER, "priority": 9}, object_type=None))) is None  # untyped
    assert asyncio.run(precheck(None, create({**ORDER, "priority": 9}))) is None  # no rules seen
    update = UpdateObject("u1", "o1", "alice", T0, patch='{"status": "approved"}')
    assert asyncio.run(precheck(view(), update)) is None  # an update's tracked fields live in the validator only


def test_a_rule_violation_is_a_422_problem_naming_the_rule_message_pointers_and_version() -> None:
    rules = compile_rules(DOC, version=4)
    outcome = decide(None, create({**ORDER, "priority": 9}), rules=rules).outcome
    assert isinstance(outcome, Rejection) and outcome.rule is not None
    summary = summarize(outcome)
    assert summary is not None
    request = Request({"type": "http", "method": "POST", "path": "/objects", "headers": [], "query_string": b""})
    r = arbiter_error(request, Rejected(summary, expected_version=None))
    body = json.loads(r.body)
    assert r.status_code == 422 and r.headers["arbiter-rules-version"] == "4"
    assert (body["code"], body["rule"], body["rules_version"]) == ("RULE_VIOLATED", outcome.rule, 4)
    assert body["rule_message"] == outcome.rule_message and body["rule_pointers"] == list(outcome.rule_pointers)


def test_a_typed_create_before_any_rules_is_a_problem_naming_the_rule_types() -> None:
    outcome = decide(None, create(ORDER)).outcome  # no rules deployed: the validator decides with rules=None
    assert isinstance(outcome, Rejection) and outcome.rule == "types" and outcome.rules_version is None
    summary = summarize(outcome)
    assert summary is not None
    request = Request({"type": "http", "method": "POST", "path": "/objects", "headers": [], "query_string": b""})
    body = json.loads(arbiter_error(request, Rejected(summary, expected_version=None)).body)
    assert (body["code"], body["rule"], body["rule_message"]) == ("RULE_VIOLATED", "types", outcome.rule_message)
    assert "rules_version" not in body and body["rule_pointers"] == list(outcome.rule_pointers)


def test_the_scenarios_second_deploy_raises_only_the_limit(tmp_path: Path) -> None:
    raised = canonical_rules(raised_limit(ORDERS.read_text()))
    assert raised != DOC and "50000" in raised and "10000" not in raised
    compile_rules(raised, version=2)
