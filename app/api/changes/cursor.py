"""The SSE id of the change feed: where a stream is on the events topic, signed for the principal it was given to.

An id is ``c2.`` + base64url (no padding) of a body, ``.``, and base64url of its MAC. The body is 8 bytes naming
the caller's groups when the id was given (a keyed digest, so a resumed stream knows whether they changed), then
unsigned LEB128 varints: the number of pairs, then (partition delta, offset) pairs in increasing partition order,
each offset the next one to read in that partition. The MAC is HMAC-SHA256, truncated to 16 bytes, over the
principal and the body, keyed by ``key_of(settings)`` (derived from ``ARBITER_AUTH_SECRET``, as the command
records' key is): an id is only ever accepted from the principal it was given to, and an id nobody was given
(``c1.AQAA``, an edited offset, an id of an older release) is refused. Opaque to clients: they only send it back in
``Last-Event-ID``. ``Cursor.after(partition, offset)`` is the id after the event at ``offset``: a stream resumed
from it reads exactly what followed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from commands.errors import ArbiterError

PREFIX = "c2."
#: Most partitions an id may name (a topic of more would need a new id version).
MAX_PARTITIONS = 4096
GROUPS_BYTES = 8
MAC_BYTES = 16
#: Longest id accepted: the groups digest and MAX_PARTITIONS pairs of at most 2 + 9 varint bytes, base64, and a MAC.
MAX_CHARS = len(PREFIX) + 4 * (GROUPS_BYTES + 2 + MAX_PARTITIONS * 11) // 3 + 4 + 1 + 4 * MAC_BYTES // 3 + 4
_KEY_LABEL = b"arbiter change-feed id key v1"


class BadCursor(ArbiterError):
    """A ``Last-Event-ID`` this API did not give to this caller (400 INVALID_CURSOR)."""

    code = "INVALID_CURSOR"


def key_of(auth_secret: str) -> bytes:
    """Return the key of the change feed's ids: derived from ``ARBITER_AUTH_SECRET`` by HMAC (every API process of
    a deployment shares it, so a stream resumes on any of them; rotating the secret voids the ids given out)."""
    return hmac.new(auth_secret.encode("utf-8"), _KEY_LABEL, hashlib.sha256).digest()


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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as e:
        raise BadCursor("Last-Event-ID is not an id of this change feed (not base64url)") from e


@dataclass(frozen=True, slots=True)
class Resume:
    """A verified id: the next offset per partition, and whether the caller's groups are those it had then."""

    offsets: dict[int, int]
    same_groups: bool


class Ids:
    """Makes and checks the ids of one principal's stream (its principal and groups, the deployment's key)."""

    __slots__ = ("_mac", "_groups", "_principal")

    def __init__(self, key: bytes, principal: str, groups: Sequence[str]) -> None:
        self._principal = principal.encode("utf-8", "surrogatepass")
        self._mac = hmac.new(key, b"id\0" + self._principal + b"\0", hashlib.sha256)
        self._groups = hmac.new(key, b"groups\0" + "\0".join(sorted(groups)).encode("utf-8", "surrogatepass"),
                                hashlib.sha256).digest()[:GROUPS_BYTES]

    def _sign(self, body: bytes) -> bytes:
        mac = self._mac.copy()
        mac.update(body)
        return mac.digest()[:MAC_BYTES]

    def encode(self, offsets: Mapping[int, int]) -> str:
        """Return the id of the stream position ``offsets`` (partition -> next offset to read)."""
        out = bytearray(self._groups)
        _varint(len(offsets), out)
        last = -1
        for partition in sorted(offsets):
            _varint(partition - last - 1, out)
            _varint(offsets[partition], out)
            last = partition
        return PREFIX + _b64(bytes(out)) + "." + _b64(self._sign(bytes(out)))

    def decode(self, text: str) -> Resume:
        """Return the position named by an id ``encode`` made for this principal; raise ``BadCursor``."""
        text = text.strip()
        if not text.startswith(PREFIX) or len(text) > MAX_CHARS or text.count(".") != 2:
            raise BadCursor("Last-Event-ID is not an id this change feed gave to this caller")
        body_text, _, mac_text = text[len(PREFIX):].partition(".")
        data, mac = _unb64(body_text), _unb64(mac_text)
        if not hmac.compare_digest(self._sign(data), mac) or len(data) < GROUPS_BYTES + 1:
            raise BadCursor("Last-Event-ID is not an id this change feed gave to this caller")
        count, i = _read_varint(data, GROUPS_BYTES)
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
        if i != len(data):
            raise BadCursor("Last-Event-ID is not an id of this change feed (trailing bytes)")
        return Resume(offsets, hmac.compare_digest(data[:GROUPS_BYTES], self._groups))


class Cursor:
    """A stream's position: the next offset to read of every partition it follows, and how its ids are made."""

    __slots__ = ("offsets", "ids")

    def __init__(self, offsets: Mapping[int, int], ids: Ids) -> None:
        self.offsets = dict(offsets)
        self.ids = ids

    def wants(self, partition: int, offset: int) -> bool:
        """Return True if the record at ``offset`` of ``partition`` is not yet behind this position."""
        return offset >= self.offsets.get(partition, 0)

    def after(self, partition: int, offset: int) -> str:
        """Move past the record at ``offset`` of ``partition`` and return the id of the new position."""
        self.offsets[partition] = offset + 1
        return self.ids.encode(self.offsets)

    def id(self) -> str:
        return self.ids.encode(self.offsets)
