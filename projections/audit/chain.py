"""The audit hash chain and entry layout; pure.

Each (topic, partition) is one chain. Entry ``seq`` (0, 1, 2, ...) stores the Kafka record exactly as consumed
(offset, timestamp, key and value bytes) and ``hash = SHA-256(prev_hash || canonical(fields))``, with
``prev_hash`` of entry 0 = 32 zero bytes. The chain's head (last hash, next seq, next offset) is written in the
same batch, so a flipped byte breaks one hash and a removed entry breaks the seq run or the head.

Offsets run on without a hole from the chain's first entry (the events and rejections topics are written by a
non-transactional, idempotent producer, so no commit marker takes an offset): the one exception is a *restart*
entry, offset ``RESTART_OFFSET`` (-1, never a Kafka offset), whose value is ``{"restart": {"from", "to",
"reason", "at_ms"}}`` in JSON: an operator resumed the partition at ``to`` though ``from``..``to - 1`` were never
read. It is hashed like any entry, so it cannot be added or removed unnoticed.

Envelopes (issue 30, erasure). A *v1* entry (written before issue 30) hashes the value bytes themselves. A *v2*
entry hashes an envelope holding the value's SHA-256 and length instead, so the value can be dropped later (an
*erased* entry keeps only that digest and length) and the chain still verifies. An *erasure* entry, offset
``ERASURE_OFFSET`` (-2), value ``{"erase": {"object_id", "seqs", "reason", "at_ms"}}``, records which entries of
its chain were erased; ``verify`` requires one for every erased entry. Stored v2 entries start, after the hash,
with a marker byte (2: value kept, 3: erased); a v1 entry starts with its offset's high byte, 0 or 255 for every
offset below 2**56, so the two layouts cannot be confused.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

GENESIS = bytes(32)
_FIXED = struct.Struct(">qqii")     # offset, timestamp_ms, key length, value length (-1 = null)
_HEAD = struct.Struct(">32sQq")     # last hash, next seq, next offset
RESTART_OFFSET = -1
ERASURE_OFFSET = -2
ENVELOPE_V1, ENVELOPE_V2 = 1, 2
_KEPT, _ERASED = 2, 3               # v2 markers after the hash: value kept, value erased


@dataclass(frozen=True, slots=True)
class Erased:
    """What a v2 entry keeps of a dropped value: its SHA-256 and length (both hashed into the chain)."""

    digest: bytes
    length: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One audited record of ``topic[partition]``, number ``seq`` in its chain."""

    topic: str
    partition: int
    seq: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    envelope: int = ENVELOPE_V2
    erased: Erased | None = None


def erased(e: Entry) -> Entry:
    """Return ``e`` with its value dropped, keeping its digest; raise ValueError if a v1 entry or no value."""
    if e.envelope != ENVELOPE_V2:
        raise ValueError(f"{e.topic}[{e.partition}] record #{e.seq} is a v1 entry: its hash covers the value itself")
    if e.value is None:
        return e
    return Entry(e.topic, e.partition, e.seq, e.offset, e.timestamp_ms, e.key, None, e.envelope,
                 Erased(hashlib.sha256(e.value).digest(), len(e.value)))


def erasure_value(object_id: str, seqs: list[int], reason: str, at_ms: int) -> bytes:
    """The value of an erasure entry."""
    return json.dumps({"erase": {"object_id": object_id, "seqs": seqs, "reason": reason, "at_ms": at_ms}},
                      sort_keys=True).encode()


def erasure_of(e: Entry) -> dict[str, object] | None:
    """Return the erasure an erasure entry records, None for others; raise ValueError if unreadable."""
    if e.offset != ERASURE_OFFSET:
        return None
    erase = json.loads(e.value or b"")["erase"]
    if not isinstance(erase, dict) or not all(isinstance(s, int) for s in erase.get("seqs", [None])):
        raise ValueError("erasure entry without its record numbers")
    return erase


def restart_value(lost_from: int | None, resume_at: int, reason: str, at_ms: int) -> bytes:
    """The value of a restart entry."""
    return json.dumps({"restart": {"from": lost_from, "to": resume_at, "reason": reason, "at_ms": at_ms}},
                      sort_keys=True).encode()


def restart_of(e: Entry) -> dict[str, object] | None:
    """Return the restart a restart entry records, None for a record's entry; raise ValueError if unreadable."""
    if e.offset != RESTART_OFFSET:
        return None
    restart = json.loads(e.value or b"")["restart"]
    if not isinstance(restart, dict) or not isinstance(restart.get("to"), int):
        raise ValueError("restart entry without a resume offset")
    return restart


@dataclass(frozen=True, slots=True)
class Head:
    hash: bytes
    next_seq: int
    next_offset: int


def _len(b: bytes | None) -> int:
    return -1 if b is None else len(b)


def _value_len(e: Entry) -> int:
    return e.erased.length if e.erased is not None else _len(e.value)


def canonical(e: Entry) -> bytes:
    topic = e.topic.encode()
    fields = [struct.pack(">I", len(topic)), topic, struct.pack(">IQ", e.partition, e.seq),
              _FIXED.pack(e.offset, e.timestamp_ms, _len(e.key), _value_len(e)), e.key or b""]
    if e.envelope == ENVELOPE_V1:
        return b"".join([*fields, e.value or b""])
    digest = e.erased.digest if e.erased is not None else (
        hashlib.sha256(e.value).digest() if e.value is not None else b"")
    return b"".join([b"\x02", *fields, digest])


def link(prev: bytes, e: Entry) -> bytes:
    """Return the hash of ``e`` chained to ``prev``."""
    return hashlib.sha256(prev + canonical(e)).digest()


def chain_prefix(topic: str, partition: int) -> bytes:
    return b"r" + topic.encode() + b"\x00" + struct.pack(">I", partition)


def entry_key(topic: str, partition: int, seq: int) -> bytes:
    return chain_prefix(topic, partition) + struct.pack(">Q", seq)


def head_key(topic: str, partition: int) -> bytes:
    return b"h" + topic.encode() + b"\x00" + struct.pack(">I", partition)


def parse_chain_key(key: bytes) -> tuple[str, int]:
    """Return (topic, partition) of a head key or an entry key."""
    body = key if key[:1] == b"h" else key[:-8]  # entry keys end in an 8-byte seq
    return body[1:-5].decode(), struct.unpack(">I", body[-4:])[0]


def pack_entry(h: bytes, e: Entry) -> bytes:
    fixed = _FIXED.pack(e.offset, e.timestamp_ms, _len(e.key), _value_len(e)) + (e.key or b"")
    if e.envelope == ENVELOPE_V1:
        return h + fixed + (e.value or b"")
    if e.erased is not None:
        return h + bytes([_ERASED]) + fixed + e.erased.digest
    return h + bytes([_KEPT]) + fixed + (e.value or b"")


def unpack_entry(key: bytes, raw: bytes) -> tuple[bytes, Entry]:
    """Return (stored hash, entry) from a stored key and value; raise ValueError on a malformed value."""
    if len(raw) < 33:
        raise ValueError("entry shorter than its fixed header")
    topic, partition = parse_chain_key(key)
    seq = struct.unpack(">Q", key[-8:])[0]
    marker = raw[32]
    envelope = ENVELOPE_V2 if marker in (_KEPT, _ERASED) else ENVELOPE_V1
    start = 33 if envelope == ENVELOPE_V2 else 32
    if len(raw) < start + _FIXED.size:
        raise ValueError("entry shorter than its fixed header")
    offset, ts, klen, vlen = _FIXED.unpack_from(raw, start)
    body = raw[start + _FIXED.size:]
    was_erased = envelope == ENVELOPE_V2 and marker == _ERASED
    stored_vlen = 32 if was_erased else max(vlen, 0)
    if max(klen, 0) + stored_vlen != len(body) or (was_erased and vlen < 0):
        raise ValueError("entry length fields do not match its body")
    k = body[:klen] if klen >= 0 else None
    rest = body[max(klen, 0):]
    if was_erased:
        return raw[:32], Entry(topic, partition, seq, offset, ts, k, None, envelope, Erased(rest, vlen))
    return raw[:32], Entry(topic, partition, seq, offset, ts, k, rest if vlen >= 0 else None, envelope)


def pack_head(h: Head) -> bytes:
    return _HEAD.pack(h.hash, h.next_seq, h.next_offset)


def unpack_head(raw: bytes) -> Head:
    return Head(*_HEAD.unpack(raw))


def object_prefix(object_id: str) -> bytes:
    """Prefix of the by-object index entries of one object."""
    return b"x" + object_id.encode() + b"\x00"


def index_key(object_id: str, topic: str, partition: int, seq: int) -> bytes:
    """Key of the by-object index entry pointing at one chain entry."""
    return object_prefix(object_id) + entry_key(topic, partition, seq)


def command_prefix(principal: str, command_id: str) -> bytes:
    """Prefix of the by-command index entries of one principal's command (lengths first: no separator ambiguity)."""
    p, c = principal.encode(), command_id.encode()
    return b"c" + struct.pack(">I", len(p)) + p + struct.pack(">I", len(c)) + c


def command_key(principal: str, command_id: str, topic: str, partition: int, seq: int) -> bytes:
    """Key of the by-(principal, command id) index entry pointing at one chain entry."""
    return command_prefix(principal, command_id) + entry_key(topic, partition, seq)


#: Marks a store whose by-(principal, object) rejection index covers every entry (``AuditProjection`` backfills it once).
REJECTION_INDEX_MARK = b"m:rejection-index-v1"


def rejection_prefix(principal: str, object_id: str) -> bytes:
    """Prefix of the by-(principal, object) index of rejections (lengths first: no separator ambiguity)."""
    p, o = principal.encode(), object_id.encode()
    return b"j" + struct.pack(">I", len(p)) + p + struct.pack(">I", len(o)) + o


def rejection_key(principal: str, object_id: str, version: int, topic: str, partition: int, seq: int) -> bytes:
    """Key of the index entry of one rejection of ``principal``'s command about ``object_id``, ordered by the
    object's ``version`` when it was rejected (a history page reads only its window)."""
    return rejection_prefix(principal, object_id) + struct.pack(">Q", version) + entry_key(topic, partition, seq)
