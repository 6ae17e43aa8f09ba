"""What the API remembers of a decision: a small summary, never the document or patch, with its size in bytes.

The outcome cache holds these per (principal, command_id) and is bounded by the sum of ``nbytes``, an
over-estimate of the Python heap an entry keeps alive (``tests/unit/test_api_outcomes.py`` measures it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from commands import Event, Rejection, RuleWarning
from commands.rejection import clip

#: Characters of a rejection's message kept; the rest is cut with an ellipsis.
MESSAGE_CHARS = 300
#: Heap of one summary beyond its strings: the object, its datetime and ints, the cache's key tuple, list and
#: OrderedDict slot. Measured with tracemalloc at ~450 bytes (CPython 3.11); rounded up for dict resizes.
ENTRY_OVERHEAD = 640


@dataclass(frozen=True, slots=True)
class OutcomeSummary:
    """One decision about one attempt of a command, as ``GET /commands/{id}`` and ``Prefer: wait`` need it.

    ``version`` is the version produced (accepted) or the object's version when rejected; ``occurred_at`` is the
    attempt's ``issued_at``; ``original_version`` is set for a DUPLICATE (the first attempt's version).
    ``partition`` and ``offset`` are where an accepted command's event is on the events topic (its position, for
    read-your-writes: ``app.api.reads.position``), None for rejections and where unknown. ``written_ms`` is the
    decision record's Kafka timestamp (when the validator wrote it), None where unknown.
    """

    kind: Literal["accepted", "rejected"]
    command_id: str
    principal: str
    object_id: str | None
    version: int | None
    occurred_at: datetime | None
    event: str | None = None
    reason: str | None = None
    message: str | None = None
    original_outcome: str | None = None
    original_version: int | None = None
    partition: int | None = None
    offset: int | None = None
    written_ms: int | None = field(default=None, compare=False)
    nbytes: int = field(default=0, compare=False)
    rules_version: int | None = None  # the team's rules it was decided under (None: no rules)
    rule: str | None = None  # for RULE_VIOLATED / RULE_ERROR: the rule's name, message and JSON pointers
    rule_message: str | None = None
    rule_pointers: tuple[str, ...] = ()
    # For an accepted command: the rules in warn mode that would have refused it (audit mode's stay in the event).
    warnings: tuple[RuleWarning, ...] = ()


def told(warnings: tuple[RuleWarning, ...]) -> tuple[RuleWarning, ...]:
    """Return the warnings a caller is told of: those of rules in warn mode (audit mode's are kept in the event,
    counted, and not shown to the caller)."""
    return tuple(w for w in warnings if w.mode == "warn")


#: The warn-code of a ``Warning`` header (RFC 7234 5.5: 299, a persistent miscellaneous warning) and its agent.
WARN_CODE = 299
WARN_AGENT = "arbiter"


def warning_header(warnings: tuple[RuleWarning, ...]) -> str:
    """Return a ``Warning`` header's value naming each rule in warn mode that would have refused the command:
    ``299 arbiter "<rule>: <message>"``, comma-separated (ASCII: other characters as JSON escapes)."""
    return ", ".join(f"{WARN_CODE} {WARN_AGENT} {json.dumps(f'{w.rule}: {w.message}')}" for w in warnings)


def warnings_json(warnings: tuple[RuleWarning, ...]) -> list[dict[str, object]]:
    """Return the warnings as an answer's body carries them."""
    return [{"rule": w.rule, "reason": w.reason, "message": w.message, "pointers": list(w.pointers)} for w in warnings]


def _size(*texts: str | None) -> int:
    return ENTRY_OVERHEAD + sum(sys.getsizeof(t) for t in texts if t is not None)


def summarize(outcome: Event | Rejection, partition: int | None = None,
              offset: int | None = None, written_ms: int | None = None) -> OutcomeSummary | None:
    """Return the summary of ``outcome`` (an event read at ``partition``/``offset`` of the events topic, written at
    ``written_ms``), or None if it answers no client (no command id or principal)."""
    if outcome.command_id is None or outcome.principal is None:
        return None
    if isinstance(outcome, Event):
        warnings = told(outcome.warnings)
        return OutcomeSummary("accepted", outcome.command_id, outcome.principal, outcome.object_id, outcome.version,
                              outcome.occurred_at, event=outcome.type.value, partition=partition, offset=offset,
                              written_ms=written_ms, nbytes=_size(outcome.command_id, outcome.principal, outcome.object_id,
                                                                  *(t for w in warnings for t in (w.rule, w.message,
                                                                                                  *w.pointers))),
                              rules_version=outcome.rules_version, warnings=warnings)
    message = clip(outcome.message, MESSAGE_CHARS)
    return OutcomeSummary("rejected", outcome.command_id, outcome.principal, outcome.object_id,
                          outcome.current_version, outcome.occurred_at, reason=outcome.reason.value, message=message,
                          original_outcome=outcome.original_outcome, original_version=outcome.original_version,
                          written_ms=written_ms, rules_version=outcome.rules_version, rule=outcome.rule,
                          rule_message=outcome.rule_message, rule_pointers=outcome.rule_pointers,
                          nbytes=_size(outcome.command_id, outcome.principal, outcome.object_id, message,
                                       outcome.rule, outcome.rule_message, *outcome.rule_pointers))
