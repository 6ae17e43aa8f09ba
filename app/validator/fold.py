"""Decide one object's records of a micro-batch in (partition, offset) order: the loop both backends share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import NamedTuple

from app.settings import Settings
from app.validator.decode import to_command
from app.validator.outputs import outcome_record
from commands import Limits, ObjectState, Rejection, decide


def limits_for(settings: Settings) -> Limits:
    """Return the domain limits with the event-time dedup TTL set to ``settings.dedup_ttl_ms``."""
    return Limits(dedup_ttl=timedelta(milliseconds=settings.dedup_ttl_ms))


class InputRecord(NamedTuple):
    """One record of the commands topic as the source gives it.

    A named tuple, not a frozen dataclass: the shard step builds one per command, and a frozen dataclass's
    generated ``__init__`` (one ``object.__setattr__`` per field) cost several times a tuple's construction.
    """

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int


OutputRecord = tuple[str, bytes | None, bytes, int]


def fold(load: Callable[[], ObjectState | None], records: Iterable[InputRecord], settings: Settings,
         limits: Limits | None = None, *, ordered: bool = False) -> tuple[list[OutputRecord], ObjectState | None, bool]:
    """Return (output records, new state, whether any command was accepted) for one key's records.

    Records are sorted by (partition, offset) first unless the caller says they are ``ordered``: Spark does
    not promise row order within a group. ``load`` is called once, at the first record that decodes: a
    record that does not decode into a command becomes a rejection and never touches the state.
    """
    limits = limits or limits_for(settings)
    partitions = settings.partitions
    out: list[OutputRecord] = []
    append = out.append
    changed = False
    loaded = False
    state: ObjectState | None = None
    for rec in records if ordered else sorted(records, key=_position):
        item = to_command(rec.key, rec.value, rec.topic, rec.partition, rec.offset, partitions=partitions)
        if isinstance(item, Rejection):
            append(outcome_record(item, settings, rec.partition))
            continue
        if not loaded:
            state, loaded = load(), True
        decision = decide(state, item, limits)
        if decision.accepted:
            changed = True
            state = decision.state
        append(outcome_record(decision.outcome, settings, rec.partition))
    return out, state, changed


def _position(rec: InputRecord) -> tuple[int, int]:
    return rec.partition, rec.offset
