"""Turn one Kafka record of the commands topic into a Command, or into a rejection that keeps its bytes."""

from __future__ import annotations

from app.validator.murmur2 import partition_for
from commands import Command, OriginalRecord, ReasonCode, Rejection, reject_record
from schemas import codec


def to_command(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int,
               *, partitions: int | None = None) -> Command | Rejection:
    """Decode ``value``; reject undecodable bytes, unknown schemas, a key that is not the object id, or a misrouted record.

    With ``partitions`` given, a record whose partition is not murmur2(key) mod ``partitions`` is
    ``MISROUTED``: accepting it would split the object's state across two shards.
    """
    key = bytes(key) if key is not None else None
    value = bytes(value) if value is not None else None
    original = OriginalRecord(topic, partition, offset, key, value)
    if value is None:
        return reject_record(original, ReasonCode.MALFORMED, f"{_at(original)}: record has no value")
    try:
        command = codec.decode_command(value)
    except codec.DecodeError as e:
        return reject_record(original, e.reason, f"{_at(original)}: {e}")
    object_key = command.object_id.encode("utf-8")
    if key != object_key:
        return reject_record(original, ReasonCode.MALFORMED,
                             f"{_at(original)}: Kafka key {key!r} is not the command's object id {command.object_id!r}",
                             object_id=command.object_id)
    if partitions is not None and partition_for(object_key, partitions) != partition:
        return reject_record(original, ReasonCode.MISROUTED,
                             f"{_at(original)}: object {command.object_id!r} belongs to partition "
                             f"{partition_for(object_key, partitions)} of {partitions}, not {partition}",
                             object_id=command.object_id)
    return command


def _at(original: OriginalRecord) -> str:
    return f"{original.topic}[{original.partition}]@{original.offset}"
