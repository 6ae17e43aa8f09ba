"""How a shard frames its batch outputs and stores large values: 64-bit lengths, values split into bounded chunks.

A micro-batch's outputs (and its changelog) can outgrow what one RocksDB value or a signed 32-bit length holds
(2 GiB): the first batch after a long outage used to fail there on every restart. Outputs are framed with 64-bit
lengths (``encode_outputs``), and a value is stored as a header at its key plus chunks of at most ``CHUNK_BYTES``
under ``<key>/<index>`` (``chunk_entries``).

An output's CloudEvents headers are not stored (``OUTPUTS_V5``): they are a function of its value alone
(``app.validator.headers``), so ``decode_outputs`` derives them again from the value when a batch is re-emitted,
the same bytes its first attempt wrote. Storing them (``OUTPUTS_V3``, briefly) more than doubled the bytes a
batch writes to RocksDB, its changelog and the checkpoint, and cost ~10 µs per command on the peers' stream
(``bench.validator.shard_task``); deriving them costs an Avro decode per record, on a replay only. Its trace
context (``app.traces``: copied from the command's headers, not derived from the value) is stored, three bytes
of lengths per record and the values when there is one, and appended again after them.

Values written by earlier versions are still read (``read_chunked``, ``decode_outputs``): ``OUTPUTS_V4`` (no
trace context) re-emits the derived headers alone; outputs with stored headers (``OUTPUTS_V3``) re-emit those;
outputs without headers (64-bit ``OUTPUTS_V2`` or 32-bit lengths) are re-emitted without headers, as their first
attempt wrote them; one unchunked value is one chunk.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from app.traces import TRACEPARENT, TRACESTATE
from app.validator.fold import OutputRecord
from app.validator.headers import Headers, ce_headers
from app.validator.rocks.checkpoint import CheckpointCorrupt
from schemas import codec
from schemas.parked import MAGICS as PARKED_MAGIC

CHUNK_BYTES = 64 * 1024 * 1024  # one RocksDB value (and one changelog entry) holds at most this much

OUTPUTS_V2 = b"\xffARBO2"   # 0xff: an old frame starts with its non-negative 32-bit record count, never 0xff
OUTPUTS_V3 = b"\xffARBO3"   # V2 + each record's headers
OUTPUTS_V4 = b"\xffARBO4"   # V2's layout; each record's headers derived from its value when read
OUTPUTS_V5 = b"\xffARBO5"   # V4 + each record's trace context (traceparent and tracestate lengths, then their bytes)
CHUNKED = b"\xffARBCH1"     # a chunked value's header: total length and chunk count follow
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HEAD = struct.Struct(">qI")  # total length, chunk count
_TRACE = struct.Struct(">BH")  # traceparent length (0 or 55), tracestate length (at most app.traces.TRACESTATE_BYTES)
_NO_TRACE = _TRACE.pack(0, 0)

Entry = tuple[bytes, bytes | None]


def encode_outputs(outputs: Sequence[OutputRecord]) -> bytes:
    """Return output records framed with 64-bit lengths: topic, key or none, value, partition, trace context (the
    other headers: derived)."""
    pack = _Q.pack
    parts = [OUTPUTS_V5, pack(len(outputs))]
    append = parts.append
    heads: dict[str, bytes] = {}  # a batch writes to two topics: frame each name once
    for topic, key, value, partition, headers in outputs:
        head = heads.get(topic)
        if head is None:
            t = topic.encode()
            head = heads[topic] = pack(len(t)) + t
        append(head)
        if key is None:
            append(pack(-1))
        else:
            append(pack(len(key)))
            append(key)
        append(pack(len(value)))
        append(value)
        append(_I.pack(partition))
        last = headers[-1][0] if headers else None
        if last != TRACEPARENT and last != TRACESTATE:  # the trace context comes last (app.validator.outputs)
            append(_NO_TRACE)
            continue
        trace = dict(headers[-2:])
        parent, state = trace.get(TRACEPARENT, b""), trace.get(TRACESTATE, b"")
        append(_TRACE.pack(len(parent), len(state)))
        append(parent)
        append(state)
    return b"".join(parts)


def decode_outputs(data: bytes, commands_topic: str,
                   protocol: Callable[[bytes, bytes], Headers] | None = None) -> list[OutputRecord]:
    """Parse ``encode_outputs``' bytes (headers derived from each value, as decided from ``commands_topic``), or
    an earlier version's framing: with stored headers, or headerless (64- or 32-bit lengths).

    ``protocol`` gives the headers of a protocol record (``app.validator.multi``: JSON, never an Avro outcome) from
    its key and value."""
    # a parked record (schemas.parked, never an Avro outcome: no magic byte 0) is written without headers
    if data.startswith(OUTPUTS_V5):
        return [(t, k, v, p, () if v.startswith(PARKED_MAGIC) else
                 protocol(k or b"", v) if protocol is not None and v[:1] == b"{" else
                 ce_headers(codec.decode_outcome(v), commands_topic) + trace)
                for t, k, v, p, trace in _decode(data, len(OUTPUTS_V5), _Q, with_trace=True)]
    if data.startswith(OUTPUTS_V4):
        return [(t, k, v, p, () if v.startswith(PARKED_MAGIC) else ce_headers(codec.decode_outcome(v), commands_topic))
                for t, k, v, p, _ in _decode(data, len(OUTPUTS_V4), _Q)]
    if data.startswith(OUTPUTS_V3):
        return _decode(data, len(OUTPUTS_V3), _Q, with_headers=True)
    if data.startswith(OUTPUTS_V2):
        return _decode(data, len(OUTPUTS_V2), _Q)
    return _decode(data, 0, _I)


def _decode(data: bytes, pos: int, length: struct.Struct, *, with_headers: bool = False,
            with_trace: bool = False) -> list[OutputRecord]:
    w = length.size
    (n,) = length.unpack_from(data, pos)
    pos += w
    out: list[OutputRecord] = []
    for _ in range(n):
        (tl,) = length.unpack_from(data, pos)
        topic = data[pos + w:pos + w + tl].decode()
        pos += w + tl
        (kl,) = length.unpack_from(data, pos)
        pos += w
        key = None if kl < 0 else data[pos:pos + kl]
        pos += max(kl, 0)
        (vl,) = length.unpack_from(data, pos)
        value = data[pos + w:pos + w + vl]
        pos += w + vl
        (partition,) = _I.unpack_from(data, pos)
        pos += 4
        headers: list[tuple[str, bytes]] = []
        if with_headers:
            (hn,) = _I.unpack_from(data, pos)
            pos += 4
            for _ in range(hn):
                (nl,) = length.unpack_from(data, pos)
                name = data[pos + w:pos + w + nl].decode()
                pos += w + nl
                (dl,) = length.unpack_from(data, pos)
                headers.append((name, data[pos + w:pos + w + dl]))
                pos += w + dl
        if with_trace:
            pl, sl = _TRACE.unpack_from(data, pos)
            pos += _TRACE.size
            if pl:
                headers.append((TRACEPARENT, data[pos:pos + pl]))
            if sl:
                headers.append((TRACESTATE, data[pos + pl:pos + pl + sl]))
            pos += pl + sl
        out.append((topic, key, value, partition, tuple(headers)))
    return out


def chunk_key(key: bytes, index: int) -> bytes:
    return key + b"/" + _I.pack(index)


def chunk_count(header: bytes | None) -> int:
    """Return how many chunks the stored value ``header`` refers to (0 for none or an unchunked value)."""
    if header is None or not header.startswith(CHUNKED):
        return 0
    return _HEAD.unpack_from(header, len(CHUNKED))[1]


def chunk_entries(key: bytes, data: bytes, old_header: bytes | None, chunk: int | None = None) -> list[Entry]:
    """Return the writes that store ``data`` at ``key`` in chunks, deleting chunks of the old value left over."""
    size = chunk or CHUNK_BYTES
    view = memoryview(data)
    n = (len(data) + size - 1) // size
    entries: list[Entry] = [(key, CHUNKED + _HEAD.pack(len(data), n))]
    entries += [(chunk_key(key, i), bytes(view[i * size:(i + 1) * size])) for i in range(n)]
    entries += [(chunk_key(key, i), None) for i in range(n, chunk_count(old_header))]
    return entries


def read_chunked(get: Callable[[bytes], bytes | None], key: bytes) -> bytes | None:
    """Return the value stored at ``key`` by ``chunk_entries`` (or unchunked, by an earlier version), or None."""
    header = get(key)
    if header is None or not bytes(header).startswith(CHUNKED):
        return None if header is None else bytes(header)
    total, n = _HEAD.unpack_from(header, len(CHUNKED))
    parts = []
    for i in range(n):
        part = get(chunk_key(key, i))
        if part is None:
            raise CheckpointCorrupt(f"chunk {i} of {n} of {key!r} is missing from the shard")
        parts.append(part)
    data = b"".join(parts)
    if len(data) != total:
        raise CheckpointCorrupt(f"{key!r}: {len(data)} bytes in its chunks, its header says {total}")
    return data
