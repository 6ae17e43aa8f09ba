"""Tests beside the rules (``commands.rules.cases``): a document's own cases run on the real ``decide``, failures
name the rule and the values, coverage names what no case exercised, and a failing document is not deployable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main
from app.rules.deploy import check
from app.run.scenario import ORDERS, raised_limit
from commands.rules import RulesInvalid
from commands.rules.cases import run_cases
from commands.rules.meta_schema import MAX_CASE_STEPS, MAX_CASES

pytestmark = pytest.mark.unit

FLOW = {"rules": 1, "types": {"task": {
    "tracked": {"state": "/state"},
    "transitions": [{"name": "flow", "field": "state", "initial": ["open"],
                     "allowed": {"open": ["doing"], "doing": ["done", "open"], "done": []}}],
    "guards": [{"name": "small", "kinds": ["create", "update"], "expr": "next.state != 'done' || command.kind == 'update'",
                "message": "created done"}]}}}
CREATE = {"kind": "create", "type": "task", "document": {"state": "open"}}


def doc(*cases: dict) -> str:
    return json.dumps({**FLOW, "tests": list(cases)})  # JSON is YAML; safe_dump would alias the reused steps


def test_the_order_examples_cases_pass_under_both_limits_and_report_what_they_leave_out() -> None:
    text = ORDERS.read_text()
    for version in (text, raised_limit(text)):  # the scenario deploys both
        report = run_cases(version)
        assert report.failures == () and len(report.results) >= 10
        assert "order:status-flow" not in report.unexercised_rules
        assert "order:patch_schema" in report.unexercised_rules  # no case sends a patch the schema refuses
        assert report.unexercised_moves == ()  # every allowed move of status-flow is made by some case


def test_a_failing_case_names_the_rule_its_message_and_pointers() -> None:
    report = run_cases(doc({"name": "open to done", "given": [CREATE],
                            "when": {"kind": "update", "patch": {"state": "done"}}, "then": "accepted"}))
    (failure,) = report.failures
    assert failure.name == "open to done"
    assert failure.problem is not None and "expected accepted, got rejected RULE_VIOLATED by task:flow" in failure.problem
    assert "['/state']" in failure.problem
    lines = report.lines()
    assert lines[0].startswith("FAIL open to done:") and lines[1] == "0 of 1 cases passed"


def test_a_refused_given_step_and_an_expected_reason_code() -> None:
    report = run_cases(doc(
        {"name": "given refused", "given": [{**CREATE, "document": {"state": "doing"}}],
         "when": {"kind": "delete"}, "then": "accepted"},
        {"name": "stale", "given": [CREATE, {"kind": "update", "patch": {"state": "doing"}}],
         "when": {"kind": "update", "if_match": 1, "patch": {"state": "done"}}, "then": {"rejected": "VERSION_CONFLICT"}},
        {"name": "outsider", "given": [CREATE], "when": {"kind": "update", "by": "eve", "patch": {"x": 1}},
         "then": {"rejected": "NOT_FOUND"}}))
    assert [(r.name, (r.problem or "")[:40]) for r in report.results] == [
        ("given refused", "given step 1 (create) was rejected RULE_"), ("stale", ""), ("outsider", "")]


def test_coverage_names_rules_never_seen_refusing_and_allowed_moves_never_made() -> None:
    report = run_cases(doc({"name": "to doing", "given": [CREATE],
                            "when": {"kind": "update", "patch": {"state": "doing"}}, "then": "accepted"}))
    assert report.failures == ()
    assert report.unexercised_rules == ("task:max_tracked_bytes", "task:flow", "task:small")
    assert report.unexercised_moves == ("task:flow doing -> done", "task:flow doing -> open")


def test_check_deploy_and_put_refuse_a_document_whose_cases_fail() -> None:
    good = doc({"name": "ok", "when": CREATE, "then": "accepted"})
    assert check(good).version == 1
    with pytest.raises(RulesInvalid) as e:
        check(doc({"name": "wrong", "when": CREATE, "then": {"rejected": "task:flow"}}))
    assert list(e.value.problems) == ["/tests (wrong): expected rejected by task:flow, got accepted (CREATED at version 1)"]


@pytest.mark.parametrize(("cases", "steps", "ok"), [(MAX_CASES, 1, True), (MAX_CASES + 1, 1, False),
                                                    (1, MAX_CASE_STEPS, True), (1, MAX_CASE_STEPS + 1, False)])
def test_the_bounds_on_cases_and_steps(cases: int, steps: int, ok: bool) -> None:
    given = [CREATE] + [{"kind": "update", "patch": {"n": i}} for i in range(steps - 1)]
    text = doc(*[{"name": f"c{i}", "given": given, "when": {"kind": "update", "patch": {"m": 1}}, "then": "accepted"}
                 for i in range(cases)])
    if ok:
        assert run_cases(text).failures == ()
    else:
        with pytest.raises(RulesInvalid, match="/tests"):
            run_cases(text)


def test_arbiter_rules_test_prints_the_report_and_exits_1_on_a_failure(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(doc({"name": "ok", "when": CREATE, "then": "accepted"}))
    bad.write_text(doc({"name": "wrong", "when": CREATE, "then": {"rejected": "task:small"}}))
    assert main(["rules", "test", str(good)]) == 0
    assert "1 of 1 cases passed" in capsys.readouterr().out
    assert main(["rules", "test", str(bad)]) == 1
    assert "FAIL wrong: expected rejected by task:small, got accepted" in capsys.readouterr().out
