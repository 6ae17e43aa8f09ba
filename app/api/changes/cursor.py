"""The SSE id of the change feed: where a stream is on the events topic, as the next offset of every partition.

An id is ``c1.`` + base64url (no padding) of unsigned LEB128 varints: the number of pairs, then (partition delta,
offset) pairs in increasing partition order, each offset the next one to read in that partition. Opaque to
clients: they only send it back in ``Last-Event-ID``. ``Cursor.after(partition, offset)`` is the id after the
event at ``offset``: a stream resumed from it reads exactly what followed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from commands.errors import ArbiterError

PREFIX = "c1."
#: Most partitions an id may name (a topic of more would need a new id version).
MAX_PARTITIONS = 4096
#: Longest id accepted: MAX_PARTITIONS pairs of at most 2 + 9 varint bytes, base64.
MAX_CHARS = len(PREFIX) + 4 * (2 + MAX_PARTITIONS * 11) // 3 + 4


class BadCursor(ArbiterError):
    """A ``Last-Event-ID`` this API did not give out (400 BAD_REQUEST)."""

    code = "BAD_REQUEST"


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise BadCursor("Last-Event-ID is not an id of this change feed (truncated)")
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7


def encode(offsets: Mapping[int, int]) -> str:
    """Return the id of the stream position ``offsets`` (partition -> next offset to read)."""
    out = bytearray()
    _varint(len(offsets), out)
    last = -1
    for partition in sorted(offsets):
        _varint(partition - last - 1, out)
        _varint(offsets[partition], out)
        last = partition
    return PREFIX + base64.urlsafe_b64encode(bytes(out)).rstrip(b"=").decode("ascii")


def decode(text: str) -> dict[int, int]:
    """Return the next offset per partition named by an id ``encode`` made; raise ``BadCursor``."""
    text = text.strip()
    if not text.startswith(PREFIX) or len(text) > MAX_CHARS:
        raise BadCursor("Last-Event-ID is not an id of this change feed")
    body = text[len(PREFIX):]
    try:
        data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError) as e:
        raise BadCursor("Last-Event-ID is not an id of this change feed (not base64url)") from e
    count, i = _read_varint(data, 0)
    if count > MAX_PARTITIONS:
        raise BadCursor("Last-Event-ID names too many partitions")
    offsets: dict[int, int] = {}
    partition = -1
    for _ in range(count):
        delta, i = _read_varint(data, i)
        offset, i = _read_varint(data, i)
        partition += delta + 1
        if partition >= MAX_PARTITIONS:
            raise BadCursor("Last-Event-ID names a partition out of range")
        offsets[partition] = offset
    if i != len(data) or encode(offsets) != text:  # one spelling per position: no two ids for one place
        raise BadCursor("Last-Event-ID is not an id of this change feed (trailing or non-canonical bytes)")
    return offsets


class Cursor:
    """A stream's position: the next offset to read of every partition it follows."""

    __slots__ = ("offsets",)

    def __init__(self, offsets: Mapping[int, int]) -> None:
        self.offsets = dict(offsets)

    def wants(self, partition: int, offset: int) -> bool:
        """Return True if the record at ``offset`` of ``partition`` is not yet behind this position."""
        return offset >= self.offsets.get(partition, 0)

    def after(self, partition: int, offset: int) -> str:
        """Move past the record at ``offset`` of ``partition`` and return the id of the new position."""
        self.offsets[partition] = offset + 1
        return encode(self.offsets)

    def id(self) -> str:
        return encode(self.offsets)
