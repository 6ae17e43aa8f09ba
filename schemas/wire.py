"""The Confluent wire format: magic byte 0, a 4-byte big-endian schema id, then the Avro binary body."""

from __future__ import annotations

import struct

from commands.errors import ArbiterError, ReasonCode

MAGIC = 0
HEADER = struct.Struct(">BI")
HEADER_SIZE = HEADER.size


class DecodeError(ArbiterError):
    """Bytes that could not become a record; ``reason`` is MALFORMED or UNSUPPORTED_SCHEMA."""

    def __init__(self, message: str, reason: ReasonCode) -> None:
        super().__init__(message, code=reason.value)
        self.reason = reason


def header(schema_id: int) -> bytes:
    """Return the 5-byte wire header for ``schema_id``."""
    return HEADER.pack(MAGIC, schema_id)


def schema_id_of(data: bytes) -> int:
    """Return the schema id in ``data``'s header; raise ``DecodeError(MALFORMED)`` if there is none."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"expected bytes, got {type(data).__name__}", ReasonCode.MALFORMED)
    if len(data) < HEADER_SIZE:
        raise DecodeError(f"{len(data)} bytes is too short for the 5-byte wire header", ReasonCode.MALFORMED)
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise DecodeError(f"magic byte is {magic}, expected {MAGIC}", ReasonCode.MALFORMED)
    return int(schema_id)
