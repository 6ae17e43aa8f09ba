"""Rejections: a refused command, or Kafka bytes that never became a command, kept with their coordinates."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from commands.errors import ReasonCode
from commands.ids import record_rejection_id

#: How many bytes of an unusable record's key and value a rejection keeps; the rest is known by length and SHA-256.
KEEP_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class OriginalRecord:
    """Where a record came from and its raw bytes, so a bad message is kept as data.

    ``key`` and ``value`` are the record's bytes up to a bound (``keep_original``); ``key_length`` and
    ``value_length`` are the full lengths and ``key_sha256``/``value_sha256`` the hex digests of the full
    bytes, so a rejection always fits on its topic and still identifies what it refused. None for a missing
    key or value (and in rejections written before these fields existed).
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    key_length: int | None = None
    value_length: int | None = None
    key_sha256: str | None = None
    value_sha256: str | None = None

    @property
    def truncated(self) -> bool:
        """Return True if the kept key or value is shorter than the record's."""
        return ((self.key is not None and self.key_length is not None and len(self.key) < self.key_length)
                or (self.value is not None and self.value_length is not None and len(self.value) < self.value_length))


def keep_original(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                  keep: int = KEEP_BYTES) -> OriginalRecord:
    """Return the coordinates of a record with at most ``keep`` bytes each of its key and value, their full
    lengths and SHA-256 digests."""
    return OriginalRecord(
        topic, partition, offset,
        None if key is None else key[:keep], None if value is None else value[:keep],
        None if key is None else len(key), None if value is None else len(value),
        None if key is None else hashlib.sha256(key).hexdigest(),
        None if value is None else hashlib.sha256(value).hexdigest(),
    )


def clip(text: str, limit: int = 200) -> str:
    """Return ``text`` cut to ``limit`` characters with an ellipsis: for ids and keys quoted in messages."""
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a command (or a record) was refused.

    ``current_version`` is the object's version when rejected (an ETag for the API); for DUPLICATE,
    ``original_outcome`` ("ACCEPTED") and ``original_version`` say what the first attempt got.
    ``original`` is set only for records that never decoded into a command.
    ``rules_version`` is the version of the team's rules the command was decided under (None: no rules); for
    RULE_VIOLATED and RULE_ERROR, ``rule`` names the rule, ``rule_message`` is its message and ``rule_pointers`` the
    JSON pointers (into the command's document or patch) it concerns (``commands.rules``).
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
    issuer: str | None = None  # the iss and jti of the token that sent the command (the audit trail keeps them)
    jti: str | None = None
    rules_version: int | None = None
    rule: str | None = None
    rule_message: str | None = None
    rule_pointers: tuple[str, ...] = ()


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
