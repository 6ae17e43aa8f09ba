"""``arbiter rules explain`` and ``GET /commands/{id}/explanation``: one command's decision, rule by rule.

The object's records are read from the archive without Spark (``projections.archived``: its committed files only),
and, with ``tail``, the topic's records past it (``app.verify.tail``), as ``verify replay --tail`` reads them. The
rules timeline comes from the control records (``app.verify.timeline``), the state before the command from the
validator's own fold of the object's earlier records (``app.verify.refold``), and the decision from ``decide`` with
its tracing hook (``commands.rules.explain``). The explanation's decision is checked against the fold's decision of
the same record: they are one function, so a difference is a bug, reported (``matches_fold``), never hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.rules.control import CONTROL_HEADER, CONTROL_KEY, RULES_CONTROL
from app.settings import Settings
from app.signing import SIGNATURE_HEADER, checker_for
from app.validator.decode import decode_record
from app.validator.fold import limits_for
from app.verify.generations import CommandTopics
from app.verify.refold import Row, header, refold
from app.verify.timeline import RulesTimeline, build_timeline
from commands import Command, Rejection
from commands.rules.explain import Explanation, explain
from schemas import codec

_COLUMNS = ("partition", "offset", "timestamp_ms", "key", "value", "headers")


@dataclass(frozen=True, slots=True)
class Explained:
    """One record of the command: where it is, its explanation (None if its bytes did not decode into a command:
    ``undecodable`` says why) and whether the fold decided it the same (it must)."""

    topic: str
    partition: int
    offset: int
    explanation: Explanation | None
    undecodable: str | None
    matches_fold: bool

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                               "matches_fold": self.matches_fold}
        if self.explanation is not None:
            out.update(self.explanation.as_dict())
        else:
            out["undecodable"] = self.undecodable
        return out


def archived(settings: Settings, topics: Sequence[str], *, keys: Sequence[bytes] = (),
             containing: bytes | None = None) -> list[Row]:
    """Return the archived records of ``topics`` whose key is one of ``keys``, or whose value holds ``containing``
    (the archive's committed files, each record once)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from projections.archived import files as archive_files
    from projections.archived import local_root, partition_values

    root = local_root(settings.archive_location)
    if not root.exists():
        return []
    wanted = set(topics)
    out: dict[tuple[str, int, int], Row] = {}
    for f in archive_files(root):
        topic = partition_values(f).get("topic")
        if topic not in wanted:
            continue
        table = pq.read_table(f, columns=list(_COLUMNS))
        mask = pc.is_in(table.column("key"), pa.array(list(keys), pa.binary())) if keys else None
        if containing is not None:
            found = _holding(table.column("value"), containing)
            mask = found if mask is None else pc.or_(mask, found)
        if mask is None:
            continue
        for d in table.filter(mask).to_pylist():
            out[(topic, d["partition"], d["offset"])] = Row(
                topic, d["partition"], d["offset"], d["timestamp_ms"], d["key"], d["value"],
                tuple((h["key"], bytes(h["value"]) if h["value"] is not None else b"") for h in d["headers"] or ()))
    return list(out.values())


def _holding(values: Any, needle: bytes) -> Any:  # noqa: ANN401 - a pyarrow array and mask
    """Return the mask of ``values`` (binary) that contain ``needle`` (bytes compared, nulls false)."""
    import pyarrow as pa

    return pa.array([v is not None and needle in v for v in values.to_pylist()], pa.bool_())


def _controls(rows: Sequence[Row]) -> list[tuple[str, int, int, bytes | None, bytes | None, bytes | None]]:
    return [(r.topic, r.partition, r.offset, r.key, r.value, header(r.headers, SIGNATURE_HEADER)) for r in rows
            if header(r.headers, CONTROL_HEADER) == RULES_CONTROL]


def explain_records(settings: Settings, topics: CommandTopics, timeline: RulesTimeline, rows: Sequence[Row],
                    command_id: str, principal: str | None = None) -> list[Explained]:
    """Explain every record of one object's ``rows`` (its commands topics' records, any order) that carries
    ``command_id`` (of ``principal``, if given), each on the state the fold of the records before it gives."""
    mine = sorted((r for r in rows if header(r.headers, CONTROL_HEADER) is None),
                  key=lambda r: topics.position(r.topic, r.partition, r.offset))
    out: list[Explained] = []
    for i, r in enumerate(mine):
        gs = topics.settings(r.topic)
        item = _decoded(r, gs)
        if isinstance(item, Rejection) or item.command_id != command_id:
            if isinstance(item, Rejection) and item.command_id == command_id and principal is None:
                out.append(Explained(r.topic, r.partition, r.offset, None, item.message, True))
            continue
        if principal is not None and item.principal != principal:
            continue
        before = refold(mine[:i], timeline, settings, topics=topics)
        folded = refold(mine[:i + 1], timeline, settings, topics=topics).decisions[-1][1]
        version = timeline.version_at(r.topic, r.partition, r.offset, r.timestamp_ms)
        rules = timeline.shard_rules().ruleset(version) if version is not None else None
        e = explain(before.state, item, limits_for(gs), rules)
        out.append(Explained(r.topic, r.partition, r.offset, e, None,
                             codec.decode_outcome(folded[2]) == e.decision.outcome))
    return out


def _decoded(r: Row, settings: Settings) -> Command | Rejection:
    item, _ = decode_record(r.key, r.value, r.topic, r.partition, r.offset, partitions=settings.partitions,
                            signature=header(r.headers, SIGNATURE_HEADER), checker=checker_for(settings))
    return item


def explain_command(settings: Settings, command_id: str, *, object_id: str | None = None,
                    principal: str | None = None, topics: CommandTopics | None = None) -> list[Explained]:
    """Explain the records of command ``command_id`` in the archive (of ``object_id`` and ``principal`` when
    given; without ``object_id`` every archived command record holding the id's bytes is a candidate)."""
    topics = topics or CommandTopics.read(settings)
    names = topics.names
    control = CONTROL_KEY
    if object_id is None:
        found = archived(settings, names, containing=command_id.encode())
        objects = sorted({r.key for r in found if r.key is not None and r.key != control})
    else:
        objects = [object_id.encode()]
    if not objects:
        return []
    rows = archived(settings, names, keys=[*objects, control])
    timeline = build_timeline(_controls(rows), settings, topics)
    out: list[Explained] = []
    for key in objects:
        out += explain_records(settings, topics, timeline, [r for r in rows if r.key == key], command_id, principal)
    return out


__all__ = ["Explained", "archived", "explain_command", "explain_records"]
