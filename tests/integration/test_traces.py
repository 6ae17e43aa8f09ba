"""One request's trace from HTTP to the read model: the API in-process with the real OpenTelemetry SDK (an in-memory
exporter), the validator on the session's Spark (each state backend), the db, audit and log projections' runners,
the real broker."""

from __future__ import annotations

import re
import uuid
import warnings

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app import traces
from app.api.main import create_app
from app.cli.project import runner_config
from app.read_models import audit_root, open_writer
from app.settings import Settings
from app.validator.job import build_query
from app.validator.topic_io import read_all
from projections.audit import AuditProjection
from projections.db import DbProjection
from projections.log import LogProjection
from projections.runner import Runner
from schemas import codec
from tests.integration.test_api_support import auth

pytestmark = pytest.mark.integration

TIMING = re.compile(r"^produce;dur=[0-9.]+, decide;dur=[0-9.]+, outcome;dur=[0-9.]+$")


def _parent() -> tuple[str, str]:
    """A caller's trace id and its span id (as a client upstream of Arbiter would send them)."""
    return uuid.uuid4().hex, uuid.uuid4().hex[:16]


@pytest.mark.parametrize("backend", ["spark", "rocksdb"])
def test_a_requests_trace_id_is_on_its_command_its_outcome_and_the_projections_spans(spark, settings: Settings,  # noqa: ANN001
                                                                                     tmp_path, backend: str) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"state_backend": backend, "trigger_interval": "200 milliseconds", "wait_max_s": 120.0,
                                    "projection_group_prefix": f"t-{uuid.uuid4().hex[:8]}"})
    exporter = InMemorySpanExporter()
    tracers = traces.provider(s, "arbiter-test", exporter)
    assert tracers is not None
    query = build_query(spark, s)
    try:
        with TestClient(create_app(s, tracer_provider=tracers)) as client:
            alice = {**auth(s, "alice"), "Prefer": "wait=120"}
            created_trace, created_parent = _parent()
            created = client.post("/objects", json={"id": "traced", "document": {"a": 1}}, headers={  # the fast path
                **alice, "traceparent": f"00-{created_trace}-{created_parent}-01", "tracestate": "up=stream"})
            assert created.status_code == 201, created.text
            assert TIMING.fullmatch(created.headers["server-timing"]), created.headers["server-timing"]
            granted_trace, granted_parent = _parent()
            granted = client.put("/objects/traced/readers/bob", headers={  # a FastAPI route
                **alice, "traceparent": f"00-{granted_trace}-{granted_parent}-01"})
            assert granted.status_code == 200 and TIMING.fullmatch(granted.headers["server-timing"])
            stale_trace, stale_parent = _parent()
            stale = client.patch("/objects/traced", json={"b": 2}, headers={
                **alice, "If-Match": '"1"', "traceparent": f"00-{stale_trace}-{stale_parent}-01"})
            assert stale.status_code == 412 and TIMING.fullmatch(stale.headers["server-timing"]), stale.headers
            untraced = client.delete("/objects/traced", headers=alice)  # no traceparent: the API's span is a root
            assert untraced.status_code == 204 and TIMING.fullmatch(untraced.headers["server-timing"])
            assert client.get(f"/commands/{created.json()['command_id']}", headers=auth(s, "alice")).status_code == 200
    finally:
        query.stop()

    api = {span.context.trace_id: span for span in exporter.get_finished_spans() if span.kind is SpanKind.SERVER}
    assert len(api) == 4, "one span per write, none for the read"
    callers = {created_trace: created_parent, granted_trace: granted_parent, stale_trace: stale_parent}
    for trace_id, parent in callers.items():
        span = api[int(trace_id, 16)]
        assert span.parent is not None and span.parent.span_id == int(parent, 16) and span.parent.is_remote
    assert api[int(created_trace, 16)].name == "POST /objects"
    assert api[int(granted_trace, 16)].attributes["http.route"] == "/objects/{object_id}/readers/{reader}"
    [root] = [span for trace_id, span in api.items() if f"{trace_id:032x}" not in callers]
    assert root.parent is None and root.name == "DELETE /objects/{object_id}"

    def context_of(headers: tuple[tuple[str, bytes], ...]) -> tuple[bytes, bytes | None]:
        found = dict(headers)
        return found["traceparent"], found.get("tracestate")

    # The command record carries the API span's context; its decision carries the same bytes.
    by_command: dict[str, tuple[bytes, bytes | None]] = {}
    for rec in read_all(s, s.topic_commands):
        by_command[codec.decode_command(rec.value).command_id] = context_of(rec.headers)  # type: ignore[arg-type]
    outputs = read_all(s, s.topic_events) + read_all(s, s.topic_rejections)
    assert len(by_command) == len(outputs) == 4
    for rec in outputs:
        outcome = codec.decode_outcome(rec.value)  # type: ignore[arg-type]
        assert outcome.command_id is not None
        assert context_of(rec.headers) == by_command[outcome.command_id]
        assert rec.headers[-1][0] in ("traceparent", "tracestate")  # after the CloudEvents attributes
    for trace_id, span in api.items():
        parent = f"00-{trace_id:032x}-{span.context.span_id:016x}-{span.context.trace_flags:02x}".encode()
        assert span.attributes["arbiter.command_id"] in by_command
        assert by_command[span.attributes["arbiter.command_id"]][0] == parent  # type: ignore[index]
    assert by_command[api[int(created_trace, 16)].attributes["arbiter.command_id"]][1] == b"up=stream"  # type: ignore[index]

    # The projections continue each trace: a span per record, child of the API's span.
    exporter.clear()
    tracer = tracers.get_tracer("arbiter.projections")
    both = (s.topic_events, s.topic_rejections)
    for name, topics, projection in [
            ("db", (s.topic_events,), DbProjection(open_writer(s))),
            ("audit", both, AuditProjection(audit_root(s), sync=False)),
            ("log", both, LogProjection(tmp_path / "decisions.log", max_bytes=1 << 20, backups=1, sync=False))]:
        cfg = runner_config(s, name, topics, assign_all=name != "log", until_caught_up=True)
        assert Runner(cfg, projection, tracer=tracer).run().records == (3 if name == "db" else 4)  # 3 events, 1 rejection
    spans = exporter.get_finished_spans()
    for projection, records in (("db", 3), ("audit", 4), ("log", 4)):
        mine = [span for span in spans if span.name == f"{projection} apply"]
        assert len(mine) == records, projection
        for span in mine:
            parent = api[span.context.trace_id]  # the trace of the write this record was decided from
            assert span.parent is not None and span.parent.span_id == parent.context.span_id
            assert span.kind is SpanKind.CONSUMER and span.attributes["arbiter.projection"] == projection
    audited = {span.context.trace_id for span in spans if span.name == "audit apply"}
    assert audited == set(api)  # the rejected write's trace too
    tracers.shutdown()
