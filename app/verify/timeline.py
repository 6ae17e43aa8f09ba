"""The rules versions in force on each partition of the commands topic, from its control records in offset order.

Built on the driver: control records are one per partition per deploy, few. Each is applied with the validator's
own ``control_step`` (signature, shape, compile, version order), so a forged or refused one switches nothing here
either, and its refusal is an output the replay expects on the rejections topic.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.limits import size_limits
from app.settings import Settings
from app.signing import checker_for
from app.validator.outputs import OutputRecord, outcome_record
from app.validator.rules import NO_RULES, ShardRules, control_step

#: (partition, offset, key, value, signature) of one control record
ControlRow = tuple[int, int, bytes | None, bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class RulesTimeline:
    """Per partition, the offsets where the version in force changed; every version's document; control outputs."""

    switches: Mapping[int, tuple[tuple[int, int | None], ...]] = field(default_factory=dict)
    documents: Mapping[int, str] = field(default_factory=dict)
    outputs: Mapping[tuple[int, int], OutputRecord] = field(default_factory=dict)  # (partition, offset) -> output
    candidate_from_ms: int | None = None  # what-if: the candidate is in force from this Kafka timestamp on
    candidate: int | None = None  # its version

    def version_at(self, partition: int, offset: int, timestamp_ms: int | None = None) -> int | None:
        """Return the rules version in force for a command at ``partition``/``offset`` (None: no rules)."""
        if self.candidate is not None and self.candidate_from_ms is not None and timestamp_ms is not None \
                and timestamp_ms >= self.candidate_from_ms:
            return self.candidate
        steps = self.switches.get(partition, ())
        i = bisect_left(steps, (offset, -1)) - 1  # the last switch strictly before this offset
        return steps[i][1] if i >= 0 else None

    def shard_rules(self) -> ShardRules:
        """Return every version's document (a command asks only for the version in force at its offset)."""
        return ShardRules(dict(self.documents), None)

    def with_candidate(self, document: str, from_ms: int) -> RulesTimeline:
        """Return this timeline with ``document`` (canonical JSON) in force from ``from_ms`` on, on every partition."""
        version = max(self.documents, default=0) + 1
        return RulesTimeline(self.switches, {**self.documents, version: document}, self.outputs, from_ms, version)


def build_timeline(controls: Iterable[ControlRow], settings: Settings, topic: str | None = None) -> RulesTimeline:
    """Apply ``controls`` per partition in offset order, as the validator's shards did."""
    topic = topic or settings.topic_commands
    checker = checker_for(settings)
    keep = size_limits(settings.max_message_bytes).keep_bytes
    shards: dict[int, ShardRules] = {}
    switches: dict[int, list[tuple[int, int | None]]] = {}
    documents: dict[int, str] = {}
    outputs: dict[tuple[int, int], OutputRecord] = {}
    for partition, offset, key, value, signature in sorted(controls, key=lambda c: (c[0], c[1])):
        step = control_step(shards.get(partition, NO_RULES), key, value, signature, topic, partition, offset,
                            checker, keep)
        shards[partition] = step.rules
        if step.outcome is not None:
            outputs[(partition, offset)] = outcome_record(step.outcome, settings, partition)
        if step.deploy is not None:
            switches.setdefault(partition, []).append((offset, step.rules.active))
            documents.update(step.rules.documents)
    return RulesTimeline({p: tuple(s) for p, s in switches.items()}, documents, outputs)
