"""Rejections: a refused command, or Kafka bytes that never became a command, kept with their coordinates."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from commands.errors import ReasonCode
from commands.ids import record_rejection_id


@dataclass(frozen=True, slots=True)
class OriginalRecord:
    """Where a record came from and its raw bytes, so a bad message is kept as data."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a command (or a record) was refused.

    ``current_version`` is the object's version when rejected (an ETag for the API); for DUPLICATE,
    ``original_outcome`` ("ACCEPTED") and ``original_version`` say what the first attempt got.
    ``original`` is set only for records that never decoded into a command.
    """

    rejection_id: str
    reason: ReasonCode
    message: str
    command_id: str | None = None
    object_id: str | None = None
    principal: str | None = None
    occurred_at: datetime | None = None
    current_version: int | None = None
    original_outcome: str | None = None
    original_version: int | None = None
    original: OriginalRecord | None = None


def reject_record(original: OriginalRecord, reason: ReasonCode, message: str, *,
                  object_id: str | None = None) -> Rejection:
    """Reject bytes that never became a command; the id derives from topic, partition, offset and reason."""
    return Rejection(
        rejection_id=record_rejection_id(original.topic, original.partition, original.offset, reason.value),
        reason=reason,
        message=message,
        object_id=object_id,
        original=original,
    )
