"""Tests beside the rules: a rules document's own ``tests`` cases, run on the real ``decide``, and their coverage.

A case is given-when-then over one object, as an event-sourced aggregate is tested: ``given`` commands (each must be
accepted), ``when`` one command, ``then`` its expected outcome — ``accepted``, or ``{rejected: <rule>}`` naming the
rule that refuses it (``order:status-flow``) or a reason code (``VERSION_CONFLICT``), or ``{warned: <rule>}``: accepted,
with a warning of that rule in warn or audit mode (it would have refused the command). Commands are written as the
API takes them: ``{kind: create, by: alice, groups: [finance], type: order, document: {...}}``,
``{kind: update, by: alice, patch: {...}, if_match: 2}``, ``{kind: delete}``, ``{kind: grant_editor, principal: bob}``,
and so on (``commands.rules.meta_schema.COMMAND_KINDS``).

Cases run against the document they sit in (compiled as version 1: a version changes no decision), each on a fresh
object at a fixed clock, so a case decides the same everywhere. ``arbiter rules test FILE`` prints the report; a
document whose own cases fail is refused by ``arbiter rules check``, ``deploy`` and ``PUT /rules``.

Coverage names what no case exercised: rules that no case saw refuse or warn (a guard that never said no was never tested
at its boundary), and transitions' allowed moves that no accepted command made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from commands.command import (
    Command,
    CreateObject,
    DeleteObject,
    GrantEditor,
    GrantReader,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
)
from commands.decide import decide
from commands.rejection import Rejection
from commands.rules.document import RulesInvalid, parse_rules
from commands.rules.ruleset import RuleSet, compile_rules
from commands.state import ObjectState

#: The clock of every case: a command's time is this plus its step's index in seconds (guards see no other clock).
CASE_CLOCK = datetime(2026, 1, 1, tzinfo=UTC)
#: The object every case decides on.
CASE_OBJECT = "case-object"
#: The principal of a command that names none (``by``).
DEFAULT_PRINCIPAL = "alice"


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's outcome: ``problem`` is None when it passed, else what went wrong, with the values involved."""

    name: str
    problem: str | None


@dataclass(frozen=True, slots=True)
class CasesReport:
    """Every case's result, and what no case exercised."""

    results: tuple[CaseResult, ...]
    unexercised_rules: tuple[str, ...]
    unexercised_moves: tuple[str, ...]  # "<type>:<transition> <from> -> <to>"

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.results if r.problem is not None)

    def lines(self) -> list[str]:
        """Return the report as ``arbiter rules test`` prints it."""
        out = [f"{'ok  ' if r.problem is None else 'FAIL'} {r.name}" + (f": {r.problem}" if r.problem else "")
               for r in self.results]
        out.append(f"{len(self.results) - len(self.failures)} of {len(self.results)} cases passed")
        if self.unexercised_rules:
            out.append("rules no case saw refuse: " + ", ".join(self.unexercised_rules))
        if self.unexercised_moves:
            out.append("allowed moves no case made: " + ", ".join(self.unexercised_moves))
        return out


@dataclass(slots=True)
class _Seen:
    refused_by: set[str] = field(default_factory=set)
    moves: set[tuple[str, str, str]] = field(default_factory=set)  # (transition rule, from, to)


def _text(value: Any) -> str:  # noqa: ANN401 - JSON
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _command(step: dict[str, Any], i: int) -> Command:
    """Build the command a case step describes (the meta-schema has checked its shape)."""
    base: dict[str, Any] = {"command_id": f"case-{i}", "object_id": CASE_OBJECT,
                            "principal": str(step.get("by", DEFAULT_PRINCIPAL)),
                            "issued_at": CASE_CLOCK + timedelta(seconds=i),
                            "expected_version": step.get("if_match"), "groups": tuple(step.get("groups", ()))}
    kind = step["kind"]
    if kind == "create":
        return CreateObject(**base, document=_text(step.get("document", {})), object_type=step.get("type"))
    if kind == "update":
        return UpdateObject(**base, patch=_text(step.get("patch", {})))
    if kind == "delete":
        return DeleteObject(**base)
    grantee = str(step.get("principal", ""))
    grants: dict[str, Any] = {"grant_editor": (GrantEditor, "editor"), "revoke_editor": (RevokeEditor, "editor"),
                              "grant_reader": (GrantReader, "reader"), "revoke_reader": (RevokeReader, "reader")}
    cls, member = grants[kind]
    return cls(**base, **{member: grantee})  # type: ignore[no-any-return]


def _describe(outcome: Any) -> str:  # noqa: ANN401 - an Event or a Rejection
    if not isinstance(outcome, Rejection):
        warned = "".join(f"; {w.mode} {w.rule} ({w.message})" for w in outcome.warnings)
        return f"accepted ({outcome.type.value} at version {outcome.version}{warned})"
    what = f"rejected {outcome.reason.value}"
    if outcome.rule:
        what += f" by {outcome.rule}"
    if outcome.message:
        what += f" ({outcome.message}"
        what += f"; pointers {list(outcome.rule_pointers)})" if outcome.rule_pointers else ")"
    return what


def _matches(expected: Any, outcome: Any) -> bool:  # noqa: ANN401
    if expected == "accepted":
        return not isinstance(outcome, Rejection)
    if "warned" in expected:
        return not isinstance(outcome, Rejection) and any(w.rule == expected["warned"] for w in outcome.warnings)
    wanted = expected["rejected"]
    if not isinstance(outcome, Rejection):
        return False
    return bool(wanted == outcome.rule or wanted == outcome.reason.value)


def _tracked(state: ObjectState | None) -> dict[str, Any]:
    return json.loads(state.tracked) if state is not None and state.tracked else {}


def _note_move(rules: RuleSet, before: ObjectState | None, after: ObjectState | None, seen: _Seen) -> None:
    """Record each transition's (from, to) that an accepted command made."""
    if after is None or after.object_type not in rules.types:
        return
    old, new = _tracked(before), _tracked(after)
    for t in rules.types[after.object_type].transitions:
        a, b = old.get(t.pointer), new.get(t.pointer)
        if isinstance(a, str) and isinstance(b, str) and a != b:
            seen.moves.add((t.rule, a, b))


def _run_case(case: dict[str, Any], rules: RuleSet, seen: _Seen) -> CaseResult:
    name = str(case["name"])
    state: ObjectState | None = None
    steps = [*case.get("given", ()), case["when"]]
    for i, step in enumerate(steps):
        decision = decide(state, _command(step, i), rules=rules)
        outcome = decision.outcome
        if isinstance(outcome, Rejection) and outcome.rule:
            seen.refused_by.add(outcome.rule)
        elif not isinstance(outcome, Rejection):
            seen.refused_by.update(w.rule for w in outcome.warnings)
        if decision.accepted:
            _note_move(rules, state, decision.state, seen)
        if i < len(steps) - 1:
            if not decision.accepted:
                return CaseResult(name, f"given step {i + 1} ({step['kind']}) was {_describe(outcome)}")
            state = decision.state
            continue
        if not _matches(case["then"], outcome):
            then = case["then"]
            want = "accepted" if then == "accepted" else f"accepted with a warning of {then['warned']}" \
                if "warned" in then else f"rejected by {then['rejected']}"
            return CaseResult(name, f"expected {want}, got {_describe(outcome)}")
    return CaseResult(name, None)


def run_cases(document: str | bytes, rules: RuleSet | None = None) -> CasesReport:
    """Run the ``tests`` of a rules document against its own rules (``rules``: the document already compiled);
    raise RulesInvalid if it does not compile."""
    value = parse_rules(document)
    if rules is None:
        text = document.decode("utf-8") if isinstance(document, bytes) else document  # parse_rules checked UTF-8
        rules = compile_rules(text, version=1)
    seen = _Seen()
    results = tuple(_run_case(case, rules, seen) for case in value.get("tests", ()))
    unexercised = tuple(n for n in rules.rule_names() if n != "types" and n not in seen.refused_by)
    moves = tuple(f"{t.rule} {a} -> {b}" for spec in rules.types.values() for t in spec.transitions
                  for a in sorted(t.allowed) for b in sorted(t.allowed[a]) if (t.rule, a, b) not in seen.moves)
    return CasesReport(results, unexercised, moves)


def check_cases(document: str | bytes, rules: RuleSet | None = None) -> None:
    """Raise RulesInvalid naming each of the document's own cases that fails (none: nothing is raised)."""
    report = run_cases(document, rules)
    if report.failures:
        raise RulesInvalid([f"/tests ({r.name}): {r.problem}" for r in report.failures])


__all__ = ["CASE_CLOCK", "CaseResult", "CasesReport", "check_cases", "run_cases"]
