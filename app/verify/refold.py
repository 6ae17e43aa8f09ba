"""One object's archived records re-decided by the validator's own fold, and compared byte for byte with its outputs.

No Spark here: the Spark job (``app.verify.replay``) hands each object's rows to ``verify_object``; a test can too.
An object's fold always starts from no state at its first archived command: the validator's state at any later
point is not in the archive, so a replay never guesses one (``--since`` narrows what is compared, not the fold).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import NamedTuple

from app.rescale.late import late_outputs
from app.rules.control import CONTROL_HEADER, is_control
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.traces import TRACEPARENT, TRACESTATE
from app.validator.fold import InputRecord, OutputRecord, fold, limits_for
from app.validator.multi import MULTI_CONTROL, fold_multi, is_multi, uses_multi
from app.verify.generations import CommandTopics
from app.verify.timeline import RulesTimeline
from commands import Limits, ObjectState
from commands.unique import Hold
from schemas import parked as parked_codec


class Row(NamedTuple):
    """One archived record (of the commands topic, or an output topic)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


class Finding(NamedTuple):
    """A divergence: ``what`` is ``divergent`` (a stored record the fold does not produce), ``missing`` (an output
    the fold produces that is not stored) or ``order``; the coordinates are the stored record's, or the command's
    (``source_topic``: the generation's commands topic it was read from)."""

    what: str
    topic: str
    partition: int
    offset: int
    source_partition: int | None
    source_offset: int | None
    detail: str
    source_topic: str | None = None


#: Where an output came from: (commands topic, partition, offset, Kafka timestamp) of its command record
Source = tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class Refolded:
    """An object's re-decided outputs, each with the ``Source`` of the record it came from."""

    outputs: list[tuple[OutputRecord, Source]]
    decisions: list[tuple[Row, OutputRecord]]  # one per command record, in source order (what-if compares these)
    #: (topic, partition, offset) of the records written to a closed generation: the sweeper's, not a validator's
    late: frozenset[tuple[str, int, int]] = frozenset()
    state: ObjectState | None = None  # the object's state after the last record (``arbiter rules explain``)

    def lane(self, source: Source) -> bool:
        """Return whether an output of ``source`` came from the late-record sweeper (``app.rescale.late``)."""
        return source[:3] in self.late


def header(headers: Sequence[tuple[str, bytes]], name: str) -> bytes | None:
    """Return the first value of header ``name`` (None if absent)."""
    return next((v for k, v in headers if k == name), None)


def refold(commands: Iterable[Row], timeline: RulesTimeline, settings: Settings,
           limits: Limits | None = None, topics: CommandTopics | None = None) -> Refolded:
    """Re-decide one key's records of the commands topics in (generation, partition, offset) order under
    ``timeline``'s rules (``limits``: ``limits_for(settings)``, which a caller folding many keys computes once).

    Each generation's records are folded with the settings its validator had (``topics``; default: generation 0
    alone), the object's state carried from one generation into the next as the rescale carried it.
    """
    topics = topics or CommandTopics.single(settings)
    rows = sorted(commands, key=lambda r: topics.position(r.topic, r.partition, r.offset))
    limits = limits or limits_for(settings)
    outputs: list[tuple[OutputRecord, Source]] = []
    decisions: list[tuple[Row, OutputRecord]] = []
    parked: list[OutputRecord] = []
    late: set[tuple[str, int, int]] = set()
    state: ObjectState | None = None
    hold: Hold | None = None  # a decision spanning objects the key waits for (app.validator.multi)
    for topic, run in groupby(rows, key=lambda r: r.topic):
        records: list[InputRecord] = []
        cmd_rows: list[Row] = []
        for r in run:
            h = dict(reversed(r.headers)) if r.headers else {}  # the first value of a repeated name, as ``header``
            successor = topics.late(r.topic, r.partition, r.offset)
            if successor is not None:  # written after the rescale closed its topic: rejected and parked, not decided
                late.add((r.topic, r.partition, r.offset))
                outputs += [(o, (r.topic, r.partition, r.offset, r.timestamp_ms)) for o in late_outputs(
                    r.key, r.value, h.get(SIGNATURE_HEADER), r.topic, r.partition, r.offset, topics.settings(topic),
                    successor)]
                continue
            if is_control(h.get(CONTROL_HEADER)):
                out = timeline.outputs.get((r.topic, r.partition, r.offset))
                if out is not None:
                    outputs.append((out, (r.topic, r.partition, r.offset, r.timestamp_ms)))
                continue
            records.append(InputRecord(r.key, r.value, r.topic, r.partition, r.offset, h.get(SIGNATURE_HEADER),
                                       h.get(TRACEPARENT), h.get(TRACESTATE),
                                       MULTI_CONTROL if is_multi(h.get(CONTROL_HEADER)) else None,
                                       timeline.version_at(r.topic, r.partition, r.offset, r.timestamp_ms)))
            cmd_rows.append(r)
        decided, state, hold = _fold_from(state, hold, records, topics.settings(topic), limits, parked, timeline)
        # A record may decide nothing yet (a held command, a claim): its command's outcome comes with the answer.
        pairs = [(o, r) for o, r in zip(decided, cmd_rows, strict=True) if o is not None]
        outputs += [(o, (r.topic, r.partition, r.offset, r.timestamp_ms)) for o, r in pairs]
        decisions += [(r, o) for o, r in pairs]
    at = {(r.topic, r.partition, r.offset): r.timestamp_ms for r in rows}
    for copy in parked:  # a parked copy names its source record
        p = parked_codec.decode(copy[2])
        outputs.append((copy, (p.topic, p.partition, p.offset, at.get((p.topic, p.partition, p.offset), 0))))
    # in source order: the order check compares the first copies with it
    outputs.sort(key=lambda o: topics.position(*o[1][:3]))
    return Refolded(outputs, decisions, frozenset(late), state)


def _fold_from(state: ObjectState | None, hold: Hold | None, records: list[InputRecord], settings: Settings,
               limits: Limits, parked: list[OutputRecord], timeline: RulesTimeline,
               ) -> tuple[Sequence[OutputRecord | None], ObjectState | None, Hold | None]:
    """Fold one generation's records from ``state`` and ``hold`` (where the previous generation left them), as the
    validator's shard does: through ``fold_multi`` where the key is held, a record is a protocol record or the rules
    declare a unique field."""
    loaded = False

    def load() -> ObjectState | None:
        nonlocal loaded
        loaded = True
        return state

    rules = timeline.shard_rules()
    if hold is not None or any(is_multi(r.control) for r in records) or uses_multi(rules, {r.rules for r in records}):
        done = fold_multi(load, hold, records, settings, limits, rules, parked)
        return done.outputs, done.state if loaded else state, done.hold
    decided, after, _ = fold(load, records, settings, limits, ordered=True, parked=parked, rules=rules)
    return decided, after if loaded else state, None  # no record decoded: the state is what it was


def _stored(r: Row) -> OutputRecord:
    return r.topic, r.key, r.value or b"", r.partition, r.headers


def compare(expected: Refolded, stored: Iterable[Row], since_ms: int | None = None) -> list[Finding]:
    """Compare the re-decided outputs with the stored ones, as sets and then in order per topic.

    A stored record not produced by the fold is ``divergent`` (its coordinates); a produced one not stored is
    ``missing`` (its command's coordinates). Identical copies of a record are allowed (a replayed micro-batch writes
    the same bytes again); with equal sets, the first copies per topic must come in the fold's order. With
    ``since_ms``, only stored records and commands at or after that Kafka timestamp are reported.

    The order that holds is per writer: the validators' outputs (generation after generation, each in its source
    order) and, apart, the late-record sweeper's outputs (``app.rescale.late``: closed generations' tails, in their
    source order). The sweeper runs beside the current generation's validator, so where its outputs fall among the
    validator's is not fixed, and is not checked.
    """
    want = {o for o, _ in expected.outputs}
    rows = sorted(stored, key=lambda r: (r.topic, r.partition, r.offset))
    have = {_stored(r) for r in rows}
    findings: list[Finding] = []
    for r in rows:
        if _stored(r) not in want and (since_ms is None or r.timestamp_ms >= since_ms):
            findings.append(Finding("divergent", r.topic, r.partition, r.offset, None, None,
                                    "stored record is not what the fold decides"))
    for o, (src, p, off, ts) in expected.outputs:
        if o not in have and (since_ms is None or ts >= since_ms):
            findings.append(Finding("missing", o[0], o[3], -1, p, off, "the fold's output for this record is not stored",
                                    src))
    if findings:
        return findings
    swept = {o for o, src in expected.outputs if expected.lane(src)}
    for topic, lane in sorted({(o[0], expected.lane(src)) for o, src in expected.outputs}):
        first: list[OutputRecord] = []
        coords: list[Row] = []
        for r in rows:
            if r.topic == topic and (_stored(r) in swept) == lane and _stored(r) not in first:
                first.append(_stored(r))
                coords.append(r)
        order: list[OutputRecord] = []
        for o, src in expected.outputs:
            # one not stored was before ``since_ms``
            if o[0] == topic and expected.lane(src) == lane and o not in order and o in have:
                order.append(o)
        if first != order:
            i = next(i for i, (a, b) in enumerate(zip(first, order, strict=False)) if a != b)
            r = coords[i]
            findings.append(Finding("order", r.topic, r.partition, r.offset, None, None,
                                    "stored outputs of this object are in another order than its commands"))
    return findings
