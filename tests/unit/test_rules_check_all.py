"""``arbiter rules check`` (and every deploy) reports every problem of a document in one pass (issue 52, "What users
met"): the published JSON Schema's, then what compiling the well-formed parts finds (transitions, CEL)."""

from __future__ import annotations

import pytest

from app.cli import main
from app.rules.deploy import check
from commands.rules import RulesInvalid
from commands.rules.ruleset import document_problems
from tests.unit.rules_support import ORDERS

pytestmark = pytest.mark.unit

#: Four problems: an unknown key and a guard without a message (the meta-schema's), a transition of a field that is
#: not tracked, and a guard that is not CEL.
FOUR = """
rules: 1
types:
  order:
    unknown_key: 1
    tracked:
      status: /status
    transitions:
      - name: flow
        field: nope
        allowed: {draft: [], submitted: []}
    guards:
      - name: not-cel
        expr: "next.status =="
        message: m
      - name: no-message
        expr: "next.status == 'x'"
"""


def test_a_document_with_four_problems_is_refused_naming_all_four() -> None:
    with pytest.raises(RulesInvalid) as e:
        check(FOUR)
    problems = e.value.problems
    assert [p.split(":")[0] for p in problems] == ["/types/order", "/types/order/guards/1",
                                                   "/types/order/transitions/0/field", "/types/order/guards/0/expr"]
    assert "unknown_key" in problems[0] and "message" in problems[1] and "'nope' is not a tracked field" in problems[2]
    assert "Syntax error" in problems[3]


def test_the_cli_prints_every_problem_and_exits_1(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    path = tmp_path / "four.yaml"
    path.write_text(FOUR)
    assert main(["rules", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "4 problem(s); not deployable" in err and "Syntax error" in err and "unknown_key" in err


def test_a_type_whose_tracked_fields_are_refused_is_not_compiled_further() -> None:
    broken = FOUR.replace("status: /status", "status: 7")  # what its rules read is unknown
    problems = document_problems(broken)
    assert problems and all(not p.startswith(("/types/order/transitions", "/types/order/guards/0/expr"))
                            for p in problems)


def test_a_sound_document_has_no_problems_and_one_with_only_compile_problems_gives_them_as_compile_does() -> None:
    assert document_problems(ORDERS.read_text()) == []
    only_cel = ORDERS.read_text().replace("next.customer == state.customer", "next.customer ==")
    with pytest.raises(RulesInvalid) as e:
        check(only_cel)
    assert list(e.value.problems) == document_problems(only_cel) and len(e.value.problems) == 1
