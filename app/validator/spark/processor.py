"""The reference backend's StatefulProcessor: one object's commands through ``commands.decide``, state in Spark.

Three value-state variables per object, each holding the domain's Avro state bytes (``schemas.codec``):

- ``live``       the state of an existing object without its dedup entries; no TTL (an object never expires).
- ``recent``     the object's dedup entries (``ObjectState.recent``) in a carrier state; TTL ``dedup_ttl_ms``,
                 reset by every accepted command of the object.
- ``tombstone``  the whole state of a deleted object (dedup entries included); TTL ``tombstone_ttl_ms``.

Undecodable records never read or write state. See docs/concepts/validator.md for what happens after expiry.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues
from pyspark.sql.types import BinaryType, StructField, StructType

from app.rules.control import is_control
from app.settings import Settings
from app.validator.fold import InputRecord, OutputRecord, fold, limits_for
from app.validator.pyworker import freeze_imports_once
from app.validator.rules import NO_RULES
from app.validator.spark.rules_stage import control_rows, partition_rules
from commands import ObjectState
from schemas import codec

# Avro state encoding requires nullable fields.
STATE_SCHEMA = StructType([StructField("state", BinaryType(), nullable=True)])
EMPTY = ObjectState(exists=False, deleted=False, version=0, owner="")


class ValidatorProcessor(StatefulProcessor):
    """Decide each key's commands in (partition, offset) order and emit Kafka sink rows."""

    def __init__(self, settings: Settings, checkpoint: str = "") -> None:
        self.settings = settings.for_tasks()  # pickled into every task: no secret travels to the executors
        self.checkpoint = checkpoint  # where the partitions' rules timelines are (app.validator.spark.rules_stage)

    def init(self, handle: StatefulProcessorHandle) -> None:
        s = self.settings
        self.limits = limits_for(s)
        self.live = handle.getValueState("live", STATE_SCHEMA)
        self.recent = handle.getValueState("recent", STATE_SCHEMA, s.dedup_ttl_ms)
        self.tombstone = handle.getValueState("tombstone", STATE_SCHEMA, s.tombstone_ttl_ms)

    def _load(self) -> ObjectState | None:
        live = self.live.get()
        if live is not None:
            state = codec.decode_state(bytes(live[0]))
            recent = self.recent.get()
            return replace(state, recent=codec.decode_state(bytes(recent[0])).recent) if recent is not None else state
        tomb = self.tombstone.get()
        return codec.decode_state(bytes(tomb[0])) if tomb is not None else None

    def _store(self, state: ObjectState) -> None:
        if state.deleted:
            self.tombstone.update((codec.encode_state(state),))
            self.live.clear()
            self.recent.clear()
            return
        self.live.update((codec.encode_state(replace(state, recent=())),))
        self.recent.update((codec.encode_state(replace(EMPTY, recent=state.recent)),))

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:  # noqa: N802, ANN401
        records = [InputRecord(r.key, r.value, r.topic, r.partition, r.offset, r.signature, r.traceparent, r.tracestate,
                               r.control, r.rules) for r in rows]
        rules = NO_RULES
        if any(r.rules is not None or r.control is not None for r in records):
            controls = [r for r in records if is_control(r.control)]
            if controls:
                yield from control_rows(controls, self.settings, self.checkpoint)
                records = [r for r in records if not is_control(r.control)]
                if not records:
                    return
            rules = partition_rules(self.checkpoint, records)
        parked: list[OutputRecord] = []
        out, state, changed = fold(self._load, records, self.settings, self.limits, parked=parked, rules=rules)
        if changed and state is not None:
            self._store(state)
        for topic, k, v, p, h in out + parked if parked else out:
            yield Row(topic=topic, key=k, value=v, partition=p, headers=h)

    def close(self) -> None:
        freeze_imports_once()  # PySpark's daemon runs a full gc.collect() after each task (app/validator/pyworker.py)
