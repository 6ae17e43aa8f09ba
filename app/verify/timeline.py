"""The rules versions in force on each partition of the commands topics, from their control records in offset order.

Built on the driver: control records are one per partition per deploy, few. Each is applied with the validator's
own ``control_step`` (signature, shape, compile, version order), so a forged or refused one switches nothing here
either, and its refusal is an output the replay expects on the rejections topic.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.limits import size_limits
from app.rescale.split import M_RULES, merged_rules
from app.settings import Settings
from app.validator.outputs import OutputRecord, outcome_record
from app.validator.rules import NO_RULES, ShardRules, control_step, encode_shard_rules, rules_checker
from app.verify.generations import CommandTopics

#: (topic, partition, offset, key, value, signature) of one control record
ControlRow = tuple[str, int, int, bytes | None, bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class RulesTimeline:
    """Per (topic, partition), the offsets where the version in force changed; the version each generation's
    partitions start on; every version's document; control outputs."""

    switches: Mapping[tuple[str, int], tuple[tuple[int, int | None], ...]] = field(default_factory=dict)
    documents: Mapping[int, str] = field(default_factory=dict)
    outputs: Mapping[tuple[str, int, int], OutputRecord] = field(default_factory=dict)  # coordinates -> output
    candidate_from_ms: int | None = None  # what-if: the candidate is in force from this Kafka timestamp on
    candidate: int | None = None  # its version
    initial: Mapping[str, int | None] = field(default_factory=dict)  # topic -> the version its partitions start on

    def version_at(self, topic: str, partition: int, offset: int, timestamp_ms: int | None = None) -> int | None:
        """Return the rules version in force for a command at ``topic[partition]@offset`` (None: no rules)."""
        if self.candidate is not None and self.candidate_from_ms is not None and timestamp_ms is not None \
                and timestamp_ms >= self.candidate_from_ms:
            return self.candidate
        steps = self.switches.get((topic, partition), ())
        i = bisect_left(steps, (offset, -1)) - 1  # the last switch strictly before this offset
        return steps[i][1] if i >= 0 else self.initial.get(topic)

    def shard_rules(self) -> ShardRules:
        """Return every version's document (a command asks only for the version in force at its offset)."""
        return ShardRules(dict(self.documents), None)

    def with_candidate(self, document: str, from_ms: int) -> RulesTimeline:
        """Return this timeline with ``document`` (canonical JSON) in force from ``from_ms`` on, on every partition."""
        version = max(self.documents, default=0) + 1
        return RulesTimeline(self.switches, {**self.documents, version: document}, self.outputs, from_ms, version,
                             self.initial)


def build_timeline(controls: Iterable[ControlRow], settings: Settings,
                   topics: CommandTopics | None = None) -> RulesTimeline:
    """Apply ``controls`` per partition in offset order, as the validator's shards did, generation after generation.

    A rescaled generation's shards start on what the rescale seeded them with: the rules of the previous
    generation's shards merged (``app.rescale.split.merged_rules``: the versions they had seen, and the one in force
    on all of them).
    """
    topics = topics or CommandTopics.single(settings)
    checker = rules_checker(settings)
    keep = size_limits(settings.max_message_bytes).keep_bytes
    shards: dict[tuple[str, int], ShardRules] = {}
    switches: dict[tuple[str, int], list[tuple[int, int | None]]] = {}
    documents: dict[int, str] = {}
    outputs: dict[tuple[str, int, int], OutputRecord] = {}
    initial: dict[str, int | None] = {}
    mine: dict[str, list[ControlRow]] = {}
    for c in controls:
        if topics.late(c[0], c[1], c[2]) is None:  # one written after its generation closed switched nothing
            mine.setdefault(c[0], []).append(c)
    start = NO_RULES
    for n, topic in enumerate(topics.names):
        if n:  # the rescale seeded this generation's shards from the previous one's
            before = topics.names[n - 1]
            start = merged_rules({M_RULES: encode_shard_rules(shards.get((before, p), start))}
                                 for p in range(topics.settings(before).partitions))
        initial[topic] = start.active
        documents.update(start.documents)
        gs = topics.settings(topic)
        for _, partition, offset, key, value, signature in sorted(mine.get(topic, ()), key=lambda c: (c[1], c[2])):
            step = control_step(shards.get((topic, partition), start), key, value, signature, topic, partition,
                                offset, checker, keep)
            shards[(topic, partition)] = step.rules
            if step.outcome is not None:
                outputs[(topic, partition, offset)] = outcome_record(step.outcome, gs, partition)
            if step.deploy is not None:
                switches.setdefault((topic, partition), []).append((offset, step.rules.active))
                documents.update(step.rules.documents)
    return RulesTimeline({k: tuple(s) for k, s in switches.items()}, documents, outputs, initial=initial)
