"""Why a command was decided as it was: ``decide`` run again with its tracing hook, on the same state and rules.

``explain(state, command, limits, rules)`` is ``decide`` with a ``RuleTrace`` (``commands.rules.trace``): the
decision it returns is the decision, and each rule's step was recorded by the evaluation that made it. Nothing here
evaluates a rule: a second evaluator could explain a decision that was not made. The caller finds the state before
the command and the rules version in force at its offset the way a replay does (``app.verify.explain``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commands.command import Command
from commands.decide import Decision, decide
from commands.event import Event
from commands.rules.evaluate import KIND_OF
from commands.rules.ruleset import RuleSet
from commands.rules.trace import RuleTrace
from commands.state import Limits, ObjectState


@dataclass(frozen=True, slots=True)
class Explanation:
    """A command, the decision ``decide`` made with the trace on, and the trace."""

    command: Command
    decision: Decision
    rules_version: int | None
    trace: RuleTrace

    def as_dict(self) -> dict[str, Any]:
        """Return the explanation as JSON-ready values (what ``arbiter rules explain`` prints and the API answers)."""
        c, o, t = self.command, self.decision.outcome, self.trace
        out: dict[str, Any] = {
            "command_id": c.command_id, "object_id": c.object_id, "kind": KIND_OF[type(c)],
            "rules_version": self.rules_version,
            "caller": {"principal": c.principal, "groups": list(c.groups), "issuer": c.issuer},
        }
        if isinstance(o, Event):
            out["outcome"] = {"status": "accepted", "event": o.type.value, "version": o.version,
                              "warnings": [{"rule": w.rule, "mode": w.mode, "reason": w.reason, "message": w.message}
                                           for w in o.warnings]}
        else:
            out["outcome"] = {"status": "rejected", "reason": o.reason.value, "message": o.message, "rule": o.rule,
                              "rule_message": o.rule_message, "rule_pointers": list(o.rule_pointers)}
        if not t.ran:
            why = "a check before the rules decided (see the reason)" if not isinstance(o, Event) and o.rule is None \
                else "the object has no type: no rule applies"
            out["rules"], out["note"] = [], why
            return out
        out["object_type"] = t.object_type
        out["tracked"] = {"before": t.before, "after": t.after}
        out["parameters"] = {}
        out["rules"] = [s.as_dict() for s in t.steps]
        return out


def explain(state: ObjectState | None, command: Command, limits: Limits, rules: RuleSet | None) -> Explanation:
    """Decide ``command`` on ``state`` under ``rules`` with the tracing hook on; return the decision and its trace."""
    trace = RuleTrace()
    decision = decide(state, command, limits, rules, trace)
    return Explanation(command, decision, rules.version if rules is not None else None, trace)
