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
    # The common case (bytes in, a command for this key and partition out) builds nothing else: the
    # OriginalRecord is only needed by a rejection.
    if key is not None and type(key) is not bytes:
        key = bytes(key)
    if value is None:
        return _reject(key, value, topic, partition, offset, ReasonCode.MALFORMED, "record has no value")
    if type(value) is not bytes:
        value = bytes(value)
    try:
        command = codec.decode_command(value)
    except codec.DecodeError as e:
        return _reject(key, value, topic, partition, offset, e.reason, str(e))
    object_key = command.object_id.encode("utf-8")
    if key != object_key:
        return _reject(key, value, topic, partition, offset, ReasonCode.MALFORMED,
                       f"Kafka key {key!r} is not the command's object id {command.object_id!r}", command.object_id)
    if partitions is not None and partition_for(object_key, partitions) != partition:
        return _reject(key, value, topic, partition, offset, ReasonCode.MISROUTED,
                       f"object {command.object_id!r} belongs to partition "
                       f"{partition_for(object_key, partitions)} of {partitions}, not {partition}", command.object_id)
    return command


def _reject(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int, reason: ReasonCode,
            why: str, object_id: str | None = None) -> Rejection:
    original = OriginalRecord(topic, partition, offset, key, value)
    return reject_record(original, reason, f"{_at(original)}: {why}", object_id=object_id)


def _at(original: OriginalRecord) -> str:
    return f"{original.topic}[{original.partition}]@{original.offset}"
