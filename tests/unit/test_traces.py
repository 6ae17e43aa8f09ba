"""Trace context on Arbiter's records: what travels, the validator's deterministic copy (both backends' code paths),
when tracing is on, the OTLP/HTTP exporter against a real HTTP receiver, and the ``Server-Timing`` of a wait."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from app import traces
from app.api.writes.summary import OutcomeSummary
from app.api.writes.timing import server_timing
from app.settings import Settings
from app.traces import TRACESTATE_BYTES, clip_tracestate, trace_headers
from app.validator.fold import InputRecord, OutputRecord, fold
from app.validator.headers import ce_headers
from app.validator.rocks.frames import decode_outputs, encode_outputs
from app.validator.rocks.shard import run_task
from app.validator.rocks.wire import input_records, read_ipc, table_ipc
from commands import CreateObject, UpdateObject
from schemas import codec
from tests.unit.record_strategies import signature

pytestmark = pytest.mark.unit

AT = datetime(2025, 1, 1, tzinfo=UTC)
S = Settings(partitions=1, topic_events="ev", topic_rejections="rj", topic_commands="cmd")
PARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = b"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


def test_only_a_well_formed_traceparent_travels_and_tracestate_only_beside_one() -> None:
    assert trace_headers(PARENT, STATE) == (("traceparent", PARENT), ("tracestate", STATE))
    assert trace_headers(PARENT, None) == trace_headers(PARENT, b"") == (("traceparent", PARENT),)
    assert trace_headers(bytearray(PARENT), memoryview(STATE)) == trace_headers(PARENT, STATE)  # Spark's bytearrays
    for bad in (None, b"", PARENT.upper(), b"ff" + PARENT[2:], PARENT[:-1], PARENT + b"-", PARENT.replace(b"-", b"_"),
                b"00-" + b"0" * 32 + PARENT[35:], PARENT[:36] + b"0" * 16 + PARENT[52:]):
        assert trace_headers(bad, STATE) == (), bad
    assert trace_headers(PARENT, b"a=\x01") == (("traceparent", PARENT),)  # a malformed tracestate is dropped


def test_tracestate_is_clipped_to_whole_members_within_512_bytes() -> None:
    members = [f"k{i:02d}=" + "v" * 40 for i in range(20)]  # 44 bytes each
    clipped = clip_tracestate(",".join(members).encode())
    assert clipped is not None and len(clipped) <= TRACESTATE_BYTES
    assert clipped == ",".join(members[:11]).encode()  # 11 * 44 + 10 commas = 494; a 12th would be 539
    assert clip_tracestate(b" a=1 ,, b=2 ") == b"a=1,b=2"
    assert clip_tracestate(b"x=" + b"v" * 600) is None  # its one member cannot fit


def _rec(cmd: object, offset: int, parent: bytes | None = PARENT, state: bytes | None = STATE,
         value: bytes | None = None) -> InputRecord:
    k = cmd.object_id.encode()  # type: ignore[attr-defined]
    v = value if value is not None else codec.encode_command(cmd)  # type: ignore[arg-type]
    return InputRecord(k, v, "cmd", 0, offset, signature(k, v), parent, state)


def _batch() -> list[InputRecord]:
    other = b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-00"
    return [_rec(CreateObject("c1", "o1", "alice", AT, document="{}"), 0),
            _rec(UpdateObject("c2", "o1", "mallory", AT, patch="{}"), 1, other, None),  # FORBIDDEN: a rejection
            _rec(UpdateObject("c3", "o1", "alice", AT, patch='{"a":1}'), 2, None, None),  # untraced
            _rec(CreateObject("c4", "o1", "alice", AT, document="{}"), 3, value=b"\x00junk")]  # undecodable


def test_the_validator_copies_each_commands_trace_context_after_its_cloudevents_headers_deterministically() -> None:
    records = _batch()
    out, _, _ = fold(lambda: None, records, S)
    assert [o[0] for o in out] == ["ev", "rj", "ev", "rj"]
    for (_, _, value, _, headers), rec in zip(out, records, strict=True):
        ce = ce_headers(codec.decode_outcome(value), S.topic_commands)
        assert headers == ce + trace_headers(rec.traceparent, rec.tracestate)
    assert out[0][4][-2:] == (("traceparent", PARENT), ("tracestate", STATE))
    assert dict(out[1][4])["traceparent"] == records[1].traceparent and "tracestate" not in dict(out[1][4])
    assert "traceparent" not in dict(out[2][4])
    assert fold(lambda: None, records, S)[0] == out  # the same records again: byte-identical outputs


def test_the_rocksdb_path_carries_the_trace_columns_and_reemits_them_on_a_replay(tmp_path: Path) -> None:
    records = _batch()
    table = pa.table({"key": [r.key for r in records], "value": [r.value for r in records],
                      "topic": [r.topic for r in records], "partition": pa.array([0] * 4, pa.int32()),
                      "offset": pa.array([r.offset for r in records], pa.int64()),
                      "signature": [r.signature for r in records], "traceparent": [r.traceparent for r in records],
                      "tracestate": [r.tracestate for r in records]})
    assert input_records(read_ipc(table_ipc(table))) == records  # what a task sends, as the shard server reads it
    untraced = table.drop_columns(["traceparent", "tracestate"])
    assert [r[:6] for r in input_records(untraced)] == [r[:6] for r in records]
    assert all(r.traceparent is None for r in input_records(untraced))

    s = Settings(partitions=1, var_dir=tmp_path / "var", rocks_memory_mb=16, rocks_write_buffer_mb=4)
    ckpt = str(tmp_path / "ckpt")
    first = run_task(s, ckpt, 0, records, 1_800_000_000_000)
    parked: list[OutputRecord] = []  # the junk record's full bytes (app.validator.parking), after the outputs
    assert first.outputs == fold(lambda: None, records, s, parked=parked)[0] + parked and parked
    again = run_task(s, ckpt, 0, records, 1_800_000_000_000)  # Spark runs the batch again: outputs re-emitted
    assert again.replayed and again.outputs == first.outputs
    assert any(dict(o[4]).get("tracestate") == STATE for o in again.outputs)
    stored = encode_outputs(first.outputs)
    assert PARENT in stored and b"ce_id" not in stored  # the trace context is stored, the derived headers are not
    assert decode_outputs(stored, s.topic_commands) == first.outputs


def test_tracing_is_on_when_configured_only() -> None:
    off, on, unset = Settings(traces=False), Settings(traces=True), Settings()
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert not traces.enabled(unset, {}) and traces.provider(unset.model_copy(update={"traces": False}), "x") is None
    assert traces.enabled(unset, endpoint) and traces.enabled(unset, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c"})
    assert not traces.enabled(unset, {"OTEL_EXPORTER_OTLP_ENDPOINT": " "})
    assert traces.enabled(on, {}) and not traces.enabled(off, endpoint)
    assert not traces.enabled(on, {"OTEL_SDK_DISABLED": "true"})
    assert traces.current_headers() == ()  # outside any span: nothing to store


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.got.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Receiver.got = []
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_spans_go_over_otlp_http_to_the_configured_endpoint(receiver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real SDK and OTLP exporter, the endpoint from the standard variable; the receiver parses what came."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver)
    tracers = traces.provider(Settings(), "arbiter-test")
    assert tracers is not None
    with tracers.get_tracer("t").start_as_current_span("write") as span:
        headers = dict(traces.current_headers())
    tracers.shutdown()  # flushes the batch
    ctx = span.get_span_context()
    assert headers["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}".encode()
    assert [path for path, _ in _Receiver.got] == ["/v1/traces"]
    request = ExportTraceServiceRequest.FromString(_Receiver.got[0][1])
    [resource] = request.resource_spans
    assert {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"] == "arbiter-test"
    [sent] = resource.scope_spans[0].spans
    assert (sent.name, sent.trace_id.hex(), sent.span_id.hex()) == ("write", f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")


def _summary(written_ms: int | None) -> OutcomeSummary:
    return OutcomeSummary("accepted", "c", "alice", "o", 1, AT, written_ms=written_ms)


def test_server_timing_names_produce_decide_and_outcome() -> None:
    assert server_timing(0.0021, 1000.0, 0.0503, _summary(1040)) == "produce;dur=2.1, decide;dur=40.0, outcome;dur=50.3"
    assert server_timing(0.0021, 1000.0, 0.0503, _summary(990)) == "produce;dur=2.1, decide;dur=0.0, outcome;dur=50.3"
    assert server_timing(0.0021, 1000.0, 0.0503, _summary(None)) == "produce;dur=2.1, outcome;dur=50.3"
    assert server_timing(0.0021, 1000.0, None, None) == "produce;dur=2.1"  # no decision within the wait
