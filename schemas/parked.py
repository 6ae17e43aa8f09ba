"""The parked-record envelope: a command record the validator could not decode, whole, with where it came from.

A parked record's value is ``MAGIC`` then, big-endian: the source topic (u16 length + UTF-8), partition (i32),
offset (i64), reason code (u8 length + ASCII), rejection id (u8 length + ASCII), what the validator found of the
record's signature (u8 length + ASCII: one of ``SIGNATURE_STATES``), and the source record's key,
``arbiter-signature`` header and value (each i32 length, -1 for none, then the bytes). Nothing else goes in, so
the same source record always gives the same bytes (a replayed micro-batch writes an identical parked record).

``MAGIC_V1`` envelopes (written before the signature was checked ahead of parking, issue 35) have no signature
state; they decode with ``UNCHECKED``, and the parking lot checks their signature when it is asked to.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"APK2"
MAGIC_V1 = b"APK1"
MAGICS = (MAGIC, MAGIC_V1)  # what a parked record starts with (str.startswith takes the tuple)
#: What the validator found of a parked record's ``arbiter-signature`` (``app.signing.RecordSigner.verdict``):
#: genuine under a trusted key, present but not genuine, missing, or not checked (unsigned producers allowed, or
#: an envelope written before the state was recorded).
VALID, INVALID, ABSENT, UNCHECKED = "valid", "invalid", "absent", "unchecked"
SIGNATURE_STATES = (VALID, INVALID, ABSENT, UNCHECKED)
_HEAD = struct.Struct(">iq")
_LEN = struct.Struct(">i")


class ParkedFormatError(ValueError):
    """Bytes that are not a parked-record envelope."""


@dataclass(frozen=True, slots=True)
class Parked:
    """One parked command record and its coordinates on the commands topic."""

    topic: str
    partition: int
    offset: int
    reason: str
    rejection_id: str
    key: bytes | None
    signature: bytes | None
    value: bytes | None
    signature_state: str = UNCHECKED  # one of SIGNATURE_STATES

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


def _opt(b: bytes | None) -> list[bytes]:
    return [_LEN.pack(-1)] if b is None else [_LEN.pack(len(b)), b]


def encode(p: Parked) -> bytes:
    """Return the envelope of ``p``."""
    if p.signature_state not in SIGNATURE_STATES:
        raise ValueError(f"signature state {p.signature_state!r} is not one of {SIGNATURE_STATES}")
    topic, reason, rid = p.topic.encode(), p.reason.encode("ascii"), p.rejection_id.encode("ascii")
    state = p.signature_state.encode("ascii")
    return b"".join([MAGIC, struct.pack(">H", len(topic)), topic, _HEAD.pack(p.partition, p.offset),
                     bytes([len(reason)]), reason, bytes([len(rid)]), rid, bytes([len(state)]), state,
                     *_opt(p.key), *_opt(p.signature), *_opt(p.value)])


def overhead(topic: str, reason: str, rejection_id: str) -> int:
    """Return the envelope's bytes besides the key, signature and value."""
    return (len(MAGIC) + 2 + len(topic.encode()) + _HEAD.size + 3 + len(reason) + len(rejection_id)
            + max(map(len, SIGNATURE_STATES)) + 3 * _LEN.size)


def decode(data: bytes) -> Parked:
    """Return the parked record in ``data``; raise ``ParkedFormatError`` if it is not an envelope."""
    try:
        version = 2 if data.startswith(MAGIC) else 1 if data.startswith(MAGIC_V1) else 0
        if not version:
            raise ParkedFormatError("not a parked-record envelope (magic bytes differ)")
        pos = len(MAGIC)
        (tl,) = struct.unpack_from(">H", data, pos)
        topic = data[pos + 2:pos + 2 + tl].decode()
        pos += 2 + tl
        partition, offset = _HEAD.unpack_from(data, pos)
        pos += _HEAD.size
        texts = []
        for _ in range(version + 1):
            n = data[pos]
            texts.append(data[pos + 1:pos + 1 + n].decode("ascii"))
            pos += 1 + n
        parts: list[bytes | None] = []
        for _ in range(3):
            (n,) = _LEN.unpack_from(data, pos)
            pos += _LEN.size
            if n < 0:
                parts.append(None)
                continue
            if pos + n > len(data):
                raise ParkedFormatError("envelope shorter than its length fields")
            parts.append(bytes(data[pos:pos + n]))
            pos += n
        if pos != len(data):
            raise ParkedFormatError("envelope longer than its length fields")
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise ParkedFormatError(f"truncated or malformed parked-record envelope: {e}") from e
    state = texts[2] if version == 2 else UNCHECKED
    if state not in SIGNATURE_STATES:
        raise ParkedFormatError(f"unknown signature state {state[:20]!r}")
    return Parked(topic, partition, offset, texts[0], texts[1], parts[0], parts[1], parts[2], state)
