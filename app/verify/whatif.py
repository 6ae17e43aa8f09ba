"""``arbiter rules what-if``: the archived history folded twice — under the rules in force, and with a candidate
document switched in at a chosen time on every partition — and every decision that flips, per rule and reason.

Both folds are ``app.verify.refold`` (the validator's fold); only the timeline differs. From the switch on the
candidate replaces every version (later real deploys included). An object whose decision flips folds on from its
new state, so its later decisions may flip too: that is what deploying the candidate then would have done.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from app.settings import Settings
from app.validator.fold import limits_for
from app.verify.generations import CommandTopics
from app.verify.refold import Row, refold
from app.verify.replay import archive_rows, by_key, is_control_row, is_late_row, timeline_of
from app.verify.timeline import RulesTimeline
from commands import Event, Limits
from schemas import codec

FLIP_DDL = ("object_id STRING, command_id STRING, kind STRING, partition INT, offset BIGINT, timestamp_ms BIGINT, "
            "direction STRING, rule STRING, reason STRING, old STRING, new STRING, topic STRING")


class Flip(NamedTuple):
    """One decision that the candidate changes from accepted to rejected or back."""

    object_id: str | None
    command_id: str | None
    kind: str
    partition: int
    offset: int
    timestamp_ms: int
    direction: str  # "accepted->rejected" or "rejected->accepted"
    rule: str | None  # the rule that rejects (the candidate's for accepted->rejected, the old one's otherwise)
    reason: str  # the rejection's reason code
    old: str  # the outcome under the rules in force: "ACCEPTED <event type>" or "REJECTED <reason> [<rule>]"
    new: str
    topic: str = ""  # the commands topic of the command's generation (``partition`` and ``offset`` are on it)


def describe(value: bytes) -> tuple[bool, str, str | None, str]:
    """Return (accepted, text, rule, reason) of an output record's value."""
    o = codec.decode_outcome(value)
    if isinstance(o, Event):
        return True, f"ACCEPTED {o.type.value}", None, ""
    rule = getattr(o, "rule", None)
    return False, f"REJECTED {o.reason.value}" + (f" [{rule}]" if rule else ""), rule, o.reason.value


def flips(commands: Sequence[Row], now: RulesTimeline, candidate: RulesTimeline, settings: Settings,
          limits: Limits | None = None, topics: CommandTopics | None = None) -> list[Flip]:
    """Fold one key's commands (of every generation in ``topics``) under ``now`` and under ``candidate``; return the
    decisions that flip."""
    before = refold(commands, now, settings, limits, topics).decisions
    after = refold(commands, candidate, settings, limits, topics).decisions
    out: list[Flip] = []
    for (row, old), (_, new) in zip(before, after, strict=True):
        a_ok, a_text, a_rule, a_reason = describe(old[2])
        b_ok, b_text, b_rule, b_reason = describe(new[2])
        if a_ok == b_ok:
            continue
        o = codec.decode_outcome(new[2])
        kind = _kind(row)
        if a_ok:
            out.append(Flip(o.object_id, o.command_id, kind, row.partition, row.offset, row.timestamp_ms,
                            "accepted->rejected", b_rule, b_reason, a_text, b_text, row.topic))
        else:
            out.append(Flip(o.object_id, o.command_id, kind, row.partition, row.offset, row.timestamp_ms,
                            "rejected->accepted", a_rule, a_reason, a_text, b_text, row.topic))
    return out


def _kind(row: Row) -> str:
    try:
        return type(codec.decode_command(row.value or b"")).__name__
    except Exception:  # noqa: BLE001 - a record that is no command keeps no kind
        return "?"


_FLIP_NAMES = [c.split()[0] for c in FLIP_DDL.split(", ")]
_FLIP_SCHEMA = pa.schema([(n, pa.int32() if n == "partition" else pa.int64() if n in ("offset", "timestamp_ms")
                           else pa.string()) for n in _FLIP_NAMES])


class WhatIfGroup:
    """One key's commands in, its flips out (rows of ``FLIP_DDL``)."""

    def __init__(self, settings: Settings, now: RulesTimeline, candidate: RulesTimeline,
                 topics: CommandTopics | None = None) -> None:
        self.settings, self.now, self.candidate = settings.for_tasks(), now, candidate
        self.limits = limits_for(self.settings)
        self.topics = (topics or CommandTopics.single(settings)).for_tasks()

    def __call__(self, rows: list[Row]) -> list[dict[str, Any]]:
        if any(r.value is None for r in rows):  # erased (``app.verify.erased``): no commands left to re-decide
            return []
        return [dict(zip(_FLIP_NAMES, f, strict=True))
                for f in flips(rows, self.now, self.candidate, self.settings, self.limits, self.topics)]


@dataclass(frozen=True, slots=True)
class WhatIfReport:
    """Every flip, counted per (direction, rule, reason), with the commands decided and the switch point."""

    commands: int
    switch_ms: int
    candidate_digest: str
    flips: Sequence[Flip] = field(default_factory=tuple)

    def per_rule(self) -> dict[str, Counter[str]]:
        """Return, per rule (``-`` for none), the count of flips per ``direction reason``."""
        out: dict[str, Counter[str]] = {}
        for f in self.flips:
            out.setdefault(f.rule or "-", Counter())[f"{f.direction} {f.reason}"] += 1
        return out

    def as_dict(self, samples: int = 5) -> dict[str, Any]:
        rules: dict[str, Any] = {}
        for f in self.flips:
            r = rules.setdefault(f.rule or "-", {"flips": 0, "by": {}, "samples": []})
            r["flips"] += 1
            key = f"{f.direction} {f.reason}"
            r["by"][key] = r["by"].get(key, 0) + 1
            if len(r["samples"]) < samples:
                r["samples"].append(f._asdict())
        return {"commands": self.commands, "switch_ms": self.switch_ms, "candidate_digest": self.candidate_digest,
                "flips": len(self.flips),
                "accepted_to_rejected": sum(f.direction == "accepted->rejected" for f in self.flips),
                "rejected_to_accepted": sum(f.direction == "rejected->accepted" for f in self.flips),
                "rules": rules}


def what_if(spark: Any, settings: Settings, candidate: str, *, switch_ms: int = 0,  # noqa: ANN401
            limit: int = 100_000, tail: bool = False) -> WhatIfReport:
    """Fold the archive under the rules in force and with ``candidate`` (canonical JSON) from ``switch_ms`` on; with
    ``tail``, also the topics' records past the archive (``archive_rows``), as ``verify replay --tail`` reads them."""
    from pyspark.sql import functions as F

    from commands.rules import rules_digest

    topics = CommandTopics.read(settings)
    frame = archive_rows(spark, settings, topics, tail=tail)
    now = timeline_of(frame, settings, topics)
    cand = now.with_candidate(candidate, switch_ms)
    commands = frame.where(F.col("topic").isin(*topics.names))
    # only objects with a command since the switch can flip; each folds from its first command
    recent = commands.where(F.col("timestamp_ms") >= switch_ms).select("key").distinct()
    found = by_key(commands.join(recent, on="key", how="left_semi"), WhatIfGroup(settings, now, cand, topics),
                   _FLIP_SCHEMA, FLIP_DDL)
    rows = found.orderBy("timestamp_ms", "topic", "partition", "offset").limit(limit).collect()
    # decisions (not switches, nor records written to a closed generation), erased commands apart: their objects
    # are skipped
    total = commands.where((F.col("timestamp_ms") >= switch_ms) & ~is_control_row() & F.col("value").isNotNull()
                           & ~is_late_row(topics)).count()
    return WhatIfReport(total, switch_ms, rules_digest(candidate),
                        tuple(Flip(*[r[n] for n in Flip._fields]) for r in rows))


__all__ = ["Flip", "WhatIfReport", "describe", "flips", "what_if"]
