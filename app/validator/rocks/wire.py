"""The shard server's wire format: one length-prefixed frame per request and per reply, over a Unix socket.

A request carries one shard's share of a micro-batch as an Arrow IPC stream (the rows exactly as Spark's
task received them: key, value, topic, partition, offset and the header columns), plus the batch id, the batch's processing time,
the settings and the checkpoint. A reply carries the sink rows as an Arrow IPC stream (topic, key, value,
partition, headers) or an error with its machine-readable code. Arrow on both sides means the task neither builds
nor parses Python objects per row: it slices what Spark gave it and yields what the server sent back.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from app.errors import ArbiterError
from app.settings import TASK_SECRET, Settings
from app.validator.fold import InputRecord, OutputRecord
from app.validator.headers import Headers

MAGIC_REQUEST = b"ARBSQ1"
MAGIC_REPLY = b"ARBSR1"
_LEN = struct.Struct(">Q")
_REQ = struct.Struct(">qqiqII")   # batch id, now ms, partition, executor pid, settings length, checkpoint length
_REP = struct.Struct(">BBI")      # status, replayed, length of the restored-from / error-code text
OK, FAILED = 0, 1
MAX_FRAME = 1 << 34  # a frame header beyond 16 GiB is damage, not data

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
OUT_SCHEMA = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
                        ("headers", HEADERS_TYPE)])


class ShardServerUnavailable(ArbiterError):
    """The task could not reach a shard server (none started, or it died mid-request) within its deadline."""

    code = "SHARD_SERVER_UNAVAILABLE"


class ShardServerTimeout(ArbiterError):
    """A shard server took a request but sent nothing back within ``shard_request_timeout_s``: it is stalled."""

    code = "SHARD_SERVER_TIMEOUT"


class ShardRequestFailed(ArbiterError):
    """The shard server refused or failed a request; the message names the server-side error code."""

    code = "SHARD_REQUEST_FAILED"


@dataclass(frozen=True, slots=True)
class Request:
    """One shard's share of one micro-batch."""

    batch_id: int
    now_ms: int
    partition: int
    executor_pid: int
    settings: bytes   # ``settings_bytes``: the server caches the parsed object by these bytes
    checkpoint: str
    rows: bytes       # an Arrow IPC stream of the task's input columns, this partition's run only


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server did with a request: the sink rows, or the error it raised."""

    ok: bool
    replayed: bool
    text: str          # restored-from ("local", "changelogs", "snapshot", "empty") or "<CODE>: <message>"
    rows: bytes        # an Arrow IPC stream in OUT_SCHEMA (empty when there is nothing to emit)


def settings_bytes(settings: Settings) -> bytes:
    """Return the settings the shard step needs, as JSON: ``Settings.for_tasks``, the record keys their only secret."""
    tasks = settings.for_tasks()
    fields = tasks.model_dump(mode="json", exclude={"auth_secret"})
    fields["record_keys"] = tasks.record_secrets()  # the shard step checks command signatures: the keys go along
    return json.dumps(fields, sort_keys=True).encode()


def settings_from(data: bytes) -> Settings:
    """Parse ``settings_bytes``' JSON back into ``Settings`` (environment variables are not read again)."""
    fields: dict[str, Any] = json.loads(data)
    # The secret is not sent; the shard step never uses it, and the placeholder check must not refuse the rest.
    fields["auth_secret"] = TASK_SECRET
    return Settings.model_validate(fields)


def encode_request(r: Request) -> bytes:
    cp = r.checkpoint.encode()
    return b"".join([MAGIC_REQUEST, _REQ.pack(r.batch_id, r.now_ms, r.partition, r.executor_pid, len(r.settings),
                                              len(cp)), r.settings, cp, r.rows])


def decode_request(frame: bytes) -> Request:
    if not frame.startswith(MAGIC_REQUEST):
        raise ShardRequestFailed("not a shard request (bad magic)")
    pos = len(MAGIC_REQUEST)
    batch_id, now_ms, partition, pid, slen, clen = _REQ.unpack_from(frame, pos)
    pos += _REQ.size
    settings = frame[pos:pos + slen]
    checkpoint = frame[pos + slen:pos + slen + clen].decode()
    return Request(batch_id, now_ms, partition, pid, settings, checkpoint, frame[pos + slen + clen:])


def encode_reply(r: Reply) -> bytes:
    text = r.text.encode()
    return b"".join([MAGIC_REPLY, _REP.pack(OK if r.ok else FAILED, int(r.replayed), len(text)), text, r.rows])


def decode_reply(frame: bytes) -> Reply:
    if not frame.startswith(MAGIC_REPLY):
        raise ShardRequestFailed("not a shard reply (bad magic)")
    pos = len(MAGIC_REPLY)
    status, replayed, tlen = _REP.unpack_from(frame, pos)
    pos += _REP.size
    return Reply(status == OK, bool(replayed), frame[pos:pos + tlen].decode(), frame[pos + tlen:])


def send_frame(sock: socket.socket, body: bytes) -> None:
    """Send one frame: its 8-byte length, then the body (one write when small, no copy of a large body)."""
    if len(body) < 65536:
        sock.sendall(_LEN.pack(len(body)) + body)
    else:
        sock.sendall(_LEN.pack(len(body)))
        sock.sendall(body)


def recv_frame(sock: socket.socket) -> bytes | None:
    """Return the next frame, or None if the peer closed the connection cleanly before one began."""
    head = _recv_exact(sock, _LEN.size, eof_ok=True)
    if head is None:
        return None
    (n,) = _LEN.unpack(head)
    if n > MAX_FRAME:
        raise ConnectionError(f"frame of {n} bytes announced: the stream is damaged")
    body = _recv_exact(sock, n, eof_ok=False)
    assert body is not None
    return body


def _recv_exact(sock: socket.socket, n: int, *, eof_ok: bool) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0 and eof_ok:
                return None
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


# --- Arrow -------------------------------------------------------------------------------------

def table_ipc(table: pa.Table | pa.RecordBatch) -> bytes:
    """Return ``table`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write(table)
    return sink.getvalue().to_pybytes()


def read_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def input_records(table: pa.Table) -> list[InputRecord]:
    """Return the rows of a task's input table (key, value, topic, partition, offset[, signature, traceparent,
    tracestate, control]) as ``InputRecord``s."""
    records: list[InputRecord] = []
    for b in table.to_batches():
        records += map(InputRecord, b.column("key").to_pylist(), b.column("value").to_pylist(),
                       column_values(b.column("topic")), int_values(b.column("partition")),
                       int_values(b.column("offset")), _optional(b, "signature"), _optional(b, "traceparent"),
                       _optional(b, "tracestate"), _optional(b, "control"))
    return records


def _optional(batch: pa.RecordBatch, name: str) -> list[Any]:
    # A header column most records lack (the trace context, when the API does not trace) is all nulls: no per-row
    # conversion for it.
    if name not in batch.schema.names:
        return [None] * batch.num_rows
    col = batch.column(name)
    return [None] * len(col) if col.null_count == len(col) else col.to_pylist()


def output_ipc(outputs: list[OutputRecord]) -> bytes:
    """Return sink rows as an Arrow IPC stream in ``OUT_SCHEMA`` (b"" for none)."""
    if not outputs:
        return b""
    topics, keys, values, partitions, headers = zip(*outputs, strict=True)
    return table_ipc(pa.RecordBatch.from_arrays(
        [pa.array(topics, pa.string()), pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
         pa.array(partitions, pa.int32()), headers_array(headers)], schema=OUT_SCHEMA))


def headers_array(headers: Sequence[Headers]) -> pa.Array:
    """Return each row's headers as one ``HEADERS_TYPE`` array, built column-wise.

    ``pa.array`` over a list of tuples of (name, value) pairs converts every pair as a Python object; flat name and
    value columns and the rows' offsets are converted in bulk (about 1 µs per row less on the shard's hot path).
    """
    offsets = [0]
    names: list[str] = []
    data: list[bytes] = []
    for row in headers:
        for name, value in row:
            names.append(name)
            data.append(value)
        offsets.append(len(names))
    pairs = pa.StructArray.from_arrays([pa.array(names, pa.string()), pa.array(data, pa.binary())],
                                       fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pairs, type=HEADERS_TYPE)


def column_values(col: pa.Array) -> list[Any]:
    """Return ``col`` as Python values; a column of one repeated value (a task's topic) without a per-row copy."""
    if col.null_count == 0 and len(col) > 0:
        distinct = col.unique()
        if len(distinct) == 1:
            return [distinct[0].as_py()] * len(col)
    return col.to_pylist()


_INT_FORMATS = {pa.int32(): "i", pa.int64(): "q"}


def int_values(col: pa.Array) -> list[Any]:
    """Return an integer column as Python ints, read straight from its Arrow buffer when it has no nulls.

    Several times faster than ``to_pylist``, and not through numpy, whose Arrow conversion imports pandas:
    ~1 s of every new Python process's first batch (py-spy, docs/benchmarks.md).
    """
    fmt = _INT_FORMATS.get(col.type)
    if col.null_count or fmt is None or sys.byteorder != "little":
        return col.to_pylist()
    width = col.type.bit_width // 8
    return memoryview(col.buffers()[1])[col.offset * width:(col.offset + len(col)) * width].cast(fmt).tolist()
