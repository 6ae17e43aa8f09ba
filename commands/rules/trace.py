"""The tracing hook of ``decide``: what each rule saw and answered, recorded by the very evaluation that decided.

``decide(..., trace=RuleTrace())`` fills the trace as ``commands.rules.evaluate`` runs the rules; nothing is
evaluated twice or apart (``arbiter rules explain`` and ``GET /commands/{id}/explanation`` read it). A rule's
result is one of ``RESULTS``: ``passed``, ``refused`` (an enforced rule failed: it decided), ``warned`` (a rule in
warn or audit mode failed), ``not applicable`` (it does not run on this command: a guard of other kinds, a
transition of a field the command leaves as it was, a schema the type does not have). Rules after the one that
refused are not run and not listed. Without a trace (``None``, every validator's call) nothing is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

PASSED = "passed"
REFUSED = "refused"
WARNED = "warned"
NOT_APPLICABLE = "not applicable"
RESULTS = (PASSED, REFUSED, WARNED, NOT_APPLICABLE)


@dataclass(frozen=True, slots=True)
class RuleStep:
    """One rule as it ran on one command: its qualified name, what it is, its mode, result and inputs."""

    rule: str
    what: str  # "types", "schema", "bound", "transition" or "guard"
    mode: str
    result: str  # one of RESULTS
    inputs: dict[str, Any] = field(default_factory=dict)  # JSON values: what the rule read
    reason: str | None = None  # the reason code of a refusal or warning
    message: str | None = None  # its message (a guard's message expression already evaluated)

    def as_dict(self) -> dict[str, Any]:
        """Return the step as JSON-ready values."""
        out: dict[str, Any] = {"rule": self.rule, "what": self.what, "mode": self.mode, "result": self.result,
                               "inputs": self.inputs}
        if self.reason is not None:
            out["reason"] = self.reason
            out["message"] = self.message
        return out


@dataclass(slots=True)
class RuleTrace:
    """What ``commands.rules.evaluate`` records when ``decide`` is given one: the steps in the order they ran, the
    tracked fields before and after the command (by field name), and the type the rules were looked up for."""

    steps: list[RuleStep] = field(default_factory=list)
    object_type: str | None = None
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    ran: bool = False  # the rules were applied (False: a generic check decided, or the object has no type)

    def add(self, step: RuleStep) -> None:
        self.steps.append(step)


def json_value(value: Any) -> Any:  # noqa: ANN401 - a guard's variable (JSON, or a protobuf Timestamp)
    """Return a guard variable's value as JSON: a timestamp as RFC 3339 text, lists and maps walked."""
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    seconds = getattr(value, "seconds", None)
    if seconds is not None and hasattr(value, "nanos"):
        at = datetime.fromtimestamp(seconds, UTC).replace(microsecond=value.nanos // 1000)
        return at.isoformat().replace("+00:00", "Z")
    return value
