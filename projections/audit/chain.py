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


def canonical(e: Entry) -> bytes:
    topic = e.topic.encode()
    return b"".join([struct.pack(">I", len(topic)), topic, struct.pack(">IQ", e.partition, e.seq),
                     _FIXED.pack(e.offset, e.timestamp_ms, _len(e.key), _len(e.value)), e.key or b"", e.value or b""])


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
    return h + _FIXED.pack(e.offset, e.timestamp_ms, _len(e.key), _len(e.value)) + (e.key or b"") + (e.value or b"")


def unpack_entry(key: bytes, raw: bytes) -> tuple[bytes, Entry]:
    """Return (stored hash, entry) from a stored key and value; raise ValueError on a malformed value."""
    if len(raw) < 32 + _FIXED.size:
        raise ValueError("entry shorter than its fixed header")
    topic, partition = parse_chain_key(key)
    seq = struct.unpack(">Q", key[-8:])[0]
    offset, ts, klen, vlen = _FIXED.unpack_from(raw, 32)
    body = raw[32 + _FIXED.size:]
    if max(klen, 0) + max(vlen, 0) != len(body):
        raise ValueError("entry length fields do not match its body")
    k = body[:klen] if klen >= 0 else None
    v = body[max(klen, 0):] if vlen >= 0 else None
    return raw[:32], Entry(topic, partition, seq, offset, ts, k, v)


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
