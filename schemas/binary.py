"""Avro binary primitives (zig-zag varint longs, strings, unions with null, arrays) over bytes and bytearrays.

Readers take the data and a position and return ``(value, next position)``; they raise ``ValueError`` or
``IndexError`` on bytes that are not valid Avro, never loop on them. Writers append to a ``bytearray`` and
produce exactly the bytes fastavro writes (arrays as one block then 0; an empty array is a single 0).
"""

from __future__ import annotations

import struct
from functools import cache

_ONE_BYTE = [bytes((z,)) for z in range(0x80)]

# Timestamps in microseconds from 1978 to 3111 are exactly 8-byte varints. A run of n of them is read and
# written in a handful of big-int operations: each 8-byte varint is one 64-bit lane whose 7-bit groups are
# packed (read) or spread (write) with masks, in 3 steps for all lanes at once.
_EIGHT_MIN, _EIGHT_END = 1 << 48, 1 << 55  # non-negative values whose zig-zag varint is 8 bytes


@cache
def _lanes(n: int) -> tuple[int, ...]:
    def rep(lane: int) -> int:
        return int.from_bytes(lane.to_bytes(8, "little") * n, "little")
    return (rep(0x8080808080808080), rep(0x0080808080808080), rep(1), rep(0x007F007F007F007F),
            rep(0x7F007F007F007F00), rep(0x00003FFF00003FFF), rep(0x3FFF00003FFF0000), rep(0x000000000FFFFFFF),
            rep(0x0FFFFFFF00000000), rep(0x3F803F803F803F80), rep(0x0FFFC0000FFFC000),
            rep(0x00FFFFFFF0000000))


def _read_eight_byte_longs(data: bytes, pos: int, n: int) -> tuple[int, ...] | None:
    """Return the n longs at ``pos`` if all are non-negative 8-byte varints, else None."""
    end = pos + 8 * n
    if end > len(data):
        return None
    cont, expect, ones, m1lo, m1hi, m2lo, m2hi, m3lo, m3hi, *_ = _lanes(n)
    x = int.from_bytes(data[pos:end], "little")
    if x & cont != expect:
        return None
    x = (x & m1lo) | ((x & m1hi) >> 1)
    x = (x & m2lo) | ((x & m2hi) >> 2)
    x = (x & m3lo) | ((x & m3hi) >> 4)
    if x & ones:  # a negative value: let the general loop take it
        return None
    return struct.unpack(f"<{n}Q", (x >> 1).to_bytes(8 * n, "little"))


def _write_eight_byte_longs(out: bytearray, items: list[int] | tuple[int, ...]) -> bool:
    """Append ``items`` if all are non-negative 8-byte varints and return True, else append nothing."""
    n = len(items)
    if min(items) < _EIGHT_MIN or max(items) >= _EIGHT_END:
        return False
    _, expect, _, m1lo, _, m2lo, _, m3lo, _, s1, s2, s3 = _lanes(n)
    x = int.from_bytes(struct.pack(f"<{n}Q", *items), "little") << 1
    x = (x & m3lo) | ((x & s3) << 4)
    x = (x & m2lo) | ((x & s2) << 2)
    x = (x & m1lo) | ((x & s1) << 1)
    out += (x | expect).to_bytes(8 * n, "little")
    return True


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """Return the zig-zag varint long at ``pos``."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    z = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = data[pos]
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos + 1
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def read_string(data: bytes, pos: int) -> tuple[str, int]:
    """Return the UTF-8 string at ``pos``."""
    n = data[pos]
    if n < 0x80 and not n & 1:
        pos += 1
        n >>= 1
    else:
        n, pos = read_long(data, pos)
        if n < 0:
            raise ValueError(f"negative string length {n}")
    end = pos + n
    if end > len(data):
        raise ValueError("string runs past the end of the data")
    return data[pos:end].decode(), end


def read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    """Return the bytes value at ``pos``."""
    n, pos = read_long(data, pos)
    if n < 0:
        raise ValueError(f"negative bytes length {n}")
    end = pos + n
    if end > len(data):
        raise ValueError("bytes run past the end of the data")
    return bytes(data[pos:end]), end


def read_optional_string(data: bytes, pos: int) -> tuple[str | None, int]:
    """Return the ``["null", "string"]`` union at ``pos``."""
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch == 2:
        return read_string(data, pos + 1)
    raise ValueError(f"union branch byte {branch} out of range")


def read_optional_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """Return the ``["null", "bytes"]`` union at ``pos``."""
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch == 2:
        return read_bytes(data, pos + 1)
    raise ValueError(f"union branch byte {branch} out of range")


def read_optional_long(data: bytes, pos: int) -> tuple[int | None, int]:
    """Return the ``["null", "long"]`` union at ``pos``."""
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch == 2:
        return read_long(data, pos + 1)
    raise ValueError(f"union branch byte {branch} out of range")


def read_boolean(data: bytes, pos: int) -> tuple[bool, int]:
    """Return the boolean at ``pos``."""
    b = data[pos]
    if b > 1:
        raise ValueError(f"boolean byte {b}")
    return b == 1, pos + 1


def block_count(data: bytes, pos: int) -> tuple[int, int]:
    """Return (the item count of the array block at ``pos``, 0 at the array's end; the position of its items)."""
    n = data[pos]
    if n < 0x80 and not n & 1:  # the usual one-byte, non-negative count (0 ends the array)
        n >>= 1
        pos += 1
    else:
        n, pos = read_long(data, pos)
        if n < 0:  # a negative count is followed by the block's size in bytes, which we do not need
            n = -n
            _, pos = read_long(data, pos)
    if n > len(data) - pos:  # every item takes at least one byte
        raise ValueError(f"array block of {n} items in {len(data) - pos} bytes")
    return n, pos


def read_strings(data: bytes, pos: int) -> tuple[list[str], int]:
    """Return the array of strings at ``pos``."""
    if data[pos] == 0:
        return [], pos + 1
    out: list[str] = []
    n, pos = block_count(data, pos)
    while n:
        for _ in range(n):
            size = data[pos]  # the one-byte length of a short string, inlined: this loop is hot
            if size < 0x80 and not size & 1:
                start = pos + 1
                pos = start + (size >> 1)
                if pos > len(data):
                    raise ValueError("string runs past the end of the data")
                out.append(data[start:pos].decode())
            else:
                s, pos = read_string(data, pos)
                out.append(s)
        n, pos = block_count(data, pos)
    return out, pos


def read_longs(data: bytes, pos: int) -> tuple[list[int], int]:
    """Return the array of longs at ``pos``."""
    if data[pos] == 0:
        return [], pos + 1
    out: list[int] = []
    n, pos = block_count(data, pos)
    while n:
        small = data[pos:pos + n]
        if small.isascii():  # n one-byte varints: small values such as versions
            out += [(b >> 1) ^ -(b & 1) for b in small]
            pos += n
            n, pos = block_count(data, pos)
            continue
        eight = _read_eight_byte_longs(data, pos, n)
        if eight is not None:
            out += eight
            pos += 8 * n
        else:
            for _ in range(n):
                v, pos = read_long(data, pos)
                out.append(v)
        n, pos = block_count(data, pos)
    return out, pos


def write_long(out: bytearray, n: int) -> None:
    """Append the zig-zag varint of ``n``, a signed 64-bit value."""
    if 0 <= n < 0x40:
        out += _ONE_BYTE[n << 1]
        return
    if not -0x8000_0000_0000_0000 <= n <= 0x7FFF_FFFF_FFFF_FFFF:
        raise OverflowError(f"{n} does not fit an Avro long")
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        out += _ONE_BYTE[z]
        return
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def write_string(out: bytearray, s: str) -> None:
    """Append ``s`` as a length-prefixed UTF-8 string."""
    b = s.encode()
    n = len(b)
    if n < 0x40:
        out += _ONE_BYTE[n << 1]
    else:
        write_long(out, n)
    out += b


def write_bytes(out: bytearray, b: bytes) -> None:
    """Append ``b`` as a length-prefixed bytes value."""
    write_long(out, len(b))
    out += b


def write_optional_string(out: bytearray, s: str | None) -> None:
    """Append ``s`` as a ``["null", "string"]`` union."""
    if s is None:
        out.append(0)
    else:
        out.append(2)
        write_string(out, s)


def write_optional_bytes(out: bytearray, b: bytes | None) -> None:
    """Append ``b`` as a ``["null", "bytes"]`` union."""
    if b is None:
        out.append(0)
    else:
        out.append(2)
        write_bytes(out, b)


def write_optional_long(out: bytearray, n: int | None) -> None:
    """Append ``n`` as a ``["null", "long"]`` union."""
    if n is None:
        out.append(0)
    else:
        out.append(2)
        write_long(out, n)


def write_strings(out: bytearray, items: list[str] | tuple[str, ...]) -> None:
    """Append ``items`` as an array of strings."""
    if items:
        write_long(out, len(items))
        for s in items:
            b = s.encode()  # write_string, inlined: this loop is hot
            n = len(b)
            if n < 0x40:
                out += _ONE_BYTE[n << 1]
            else:
                write_long(out, n)
            out += b
    out.append(0)


def write_longs(out: bytearray, items: list[int] | tuple[int, ...]) -> None:
    """Append ``items`` as an array of longs."""
    if items:
        write_long(out, len(items))
        if not _write_eight_byte_longs(out, items):
            for n in items:
                write_long(out, n)
    out.append(0)
