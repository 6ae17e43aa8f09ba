"""The sequential reference of unique values: commands and protocol messages decided one by one, in log order.

``UniqueLog`` holds every key's state and every home's hold, and ``step`` decides one record — a command on its
object, or a message on the key it is addressed to — with the pure steps of ``commands.unique``. Whoever feeds
it decides the order (per partition, as the validator reads it); the outcomes and messages are a function of that
order alone, which is what the validator's outputs are held to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from commands.command import Command
from commands.event import Event
from commands.rejection import Rejection
from commands.rules.ruleset import RuleSet
from commands.state import DEFAULT_LIMITS, Limits, ObjectState
from commands.unique import (
    Answer,
    Claim,
    Hold,
    Message,
    Release,
    Uniques,
    answer_step,
    home_step,
    index_step,
)

Record = Command | Message


@dataclass
class UniqueLog:
    """States and holds by key; ``rules_of(version)`` gives the compiled rules of a version (None: no rules)."""

    uniques: Uniques
    limits: Limits = DEFAULT_LIMITS
    rules: RuleSet | None = None  # the rules in force for commands
    rules_of: Callable[[int | None], RuleSet | None] | None = None  # a hold's version's rules (default: ``rules``)
    states: dict[str, ObjectState | None] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)

    def step(self, record: Record) -> tuple[Event | Rejection | None, tuple[Message, ...]]:
        """Decide ``record``; return its outcome (None: none yet, or a message) and the messages it sends."""
        if isinstance(record, Claim | Release):
            result = index_step(self.states.get(record.index), record)
            self._put(record.index, result.entry)
            return None, result.messages
        if isinstance(record, Answer):
            key = record.home
            hold = self.holds.get(key)
            rules = self.rules if hold is None or self.rules_of is None else self.rules_of(hold.rules_version)
            home = answer_step(self.states.get(key), hold, record, self.uniques, self.limits, rules)
        else:
            key = record.object_id
            home = home_step(self.states.get(key), self.holds.get(key), record, self.uniques, self.limits, self.rules)
        self._put(key, home.state)
        if home.hold is None:
            self.holds.pop(key, None)
        else:
            self.holds[key] = home.hold
        return home.outcome, home.messages

    def _put(self, key: str, state: ObjectState | None) -> None:
        if state is None:
            self.states.pop(key, None)
        else:
            self.states[key] = state
