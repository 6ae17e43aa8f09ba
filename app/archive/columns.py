"""Decode archived records into the columns a query needs; a record that does not decode keeps only its raw columns."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from commands import Event, Rejection
from schemas import codec, parked
from schemas.codec import DecodeError
from schemas.generations import generation_of

#: The decoded columns, beside the raw ones (topic, partition, offset, timestamp, key, value, headers).
DECODED_DDL = ("kind STRING, object_id STRING, type STRING, version BIGINT, principal STRING, time_us BIGINT, "
               "reason STRING, command_id STRING, record_id STRING, decode_error STRING")
DECODED = tuple(c.split()[0] for c in DECODED_DDL.split(", "))


def _us(at: datetime | None) -> int | None:
    if at is None:
        return None
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def decoded(kind: str, value: bytes | None) -> dict[str, Any]:
    """Return the decoded columns of one record of ``kind`` (command, event, rejection or parked)."""
    row: dict[str, Any] = dict.fromkeys(DECODED)
    row["kind"] = kind
    if value is None:
        row["decode_error"] = "record has no value"
        return row
    try:
        if kind == "command":
            c = codec.decode_command(value)
            row.update(object_id=c.object_id, type=type(c).__name__, version=c.expected_version, principal=c.principal,
                       time_us=_us(c.issued_at), command_id=c.command_id)
        elif kind == "parked":
            p = parked.decode(value)
            row.update(reason=p.reason, record_id=p.rejection_id, object_id=_text(p.key))
        else:
            o = codec.decode_outcome(value)
            if isinstance(o, Event):
                row.update(object_id=o.object_id, type=o.type.value, version=o.version, principal=o.principal,
                           time_us=_us(o.occurred_at), command_id=o.command_id, record_id=o.event_id)
            elif isinstance(o, Rejection):
                row.update(object_id=o.object_id, type="REJECTED", version=o.current_version, principal=o.principal,
                           time_us=_us(o.occurred_at), reason=o.reason.value, command_id=o.command_id,
                           record_id=o.rejection_id)
    except (DecodeError, parked.ParkedFormatError, ValueError) as e:
        row = dict.fromkeys(DECODED)
        row.update(kind=kind, decode_error=str(e)[:500])
    return row


def _text(key: bytes | None) -> str | None:
    try:
        return None if key is None else key.decode("utf-8")
    except UnicodeDecodeError:
        return None


class Decoder:
    """``mapInArrow`` function: add the decoded columns to batches of (topic, value, ...) rows."""

    def __init__(self, kinds: dict[str, str], commands: str | None = None) -> None:
        self.kinds = dict(kinds)  # topic name -> kind
        self.commands = commands  # generation 0's commands topic: every generation's holds commands

    def kind(self, topic: str) -> str:
        """Return what ``topic`` holds: its kind, ``command`` for any generation's commands topic, else unknown."""
        found = self.kinds.get(topic)
        if found is None:
            found = "command" if self.commands and generation_of(self.commands, topic) is not None else "unknown"
            self.kinds[topic] = found
        return found

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            topics = batch.column("topic").to_pylist()
            values = batch.column("value").to_pylist()
            rows = [decoded(self.kind(t), v) for t, v in zip(topics, values, strict=True)]
            cols = {name: batch.column(name) for name in batch.schema.names}
            for name in DECODED:
                cols[name] = pa.array([r[name] for r in rows], type=pa.int64() if name in ("version", "time_us")
                                      else pa.string())
            yield pa.RecordBatch.from_pydict(cols)
