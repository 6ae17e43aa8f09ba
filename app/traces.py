"""W3C trace context on Arbiter's records and the OpenTelemetry SDK of its processes (off unless configured).

The API starts a span for each write and stores its context on the command record as the headers ``traceparent``
and ``tracestate``; the validator copies them onto the event or rejection (``app.validator.headers``); the
projections start a span per record, child of that context (``projections.runner``). Only well-formed values
travel (``trace_headers``): a version-00 ``traceparent`` and, with it, at most ``TRACESTATE_BYTES`` of
``tracestate`` (whole list members, left to right), so the headers fit the room ``app.limits.HEADERS_BYTES``
keeps and a replay copies the same bytes. The header functions import nothing of OpenTelemetry: the validator's
Python workers use them on their hot path.

Tracing is on when ``ARBITER_TRACES=true``, or when ``ARBITER_TRACES`` is unset and the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (``OTEL_SDK_DISABLED=true`` turns it
off). Spans go over OTLP/HTTP (protobuf) to that endpoint, configured by the standard ``OTEL_*`` variables.
Off, no tracer exists and nothing on the hot paths creates a span or reads a header for it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from app.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: What a ``tracestate`` is clipped to: what W3C Trace Context asks every vendor to propagate at least.
TRACESTATE_BYTES = 512
#: A version-00 traceparent (the ids not all zeros: checked apart); the AsyncAPI document states it.
TRACEPARENT_PATTERN = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
_TRACEPARENT = re.compile(rb"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE_MEMBER = re.compile(rb"[\x20-\x2b\x2d-\x7e]*")  # printable ASCII but ","
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

Header = tuple[str, bytes]


def clip_tracestate(value: bytes) -> bytes | None:
    """Return ``value``'s list members, left to right, as many as fit ``TRACESTATE_BYTES``; None if none or malformed."""
    if not _TRACESTATE_MEMBER.fullmatch(value.replace(b",", b"")):
        return None
    kept: list[bytes] = []
    size = -1
    for member in value.split(b","):
        member = member.strip(b" \t")
        if not member:
            continue
        if size + 1 + len(member) > TRACESTATE_BYTES:
            break
        kept.append(member)
        size += 1 + len(member)
    return b",".join(kept) or None


def trace_headers(traceparent: bytes | None, tracestate: bytes | None) -> tuple[Header, ...]:
    """Return the trace context headers to write for these values: none without a well-formed version-00
    ``traceparent``, the ``tracestate`` only beside one (clipped by ``clip_tracestate``).

    Pure: the same values give the same bytes, which is what makes the validator's copy deterministic.
    """
    if traceparent is None or len(traceparent) != 55 or not _TRACEPARENT.fullmatch(traceparent):
        return ()
    if type(traceparent) is not bytes:
        traceparent = bytes(traceparent)
    state = clip_tracestate(bytes(tracestate)) if tracestate else None
    if state is None:
        return ((TRACEPARENT, traceparent),)
    return ((TRACEPARENT, traceparent), (TRACESTATE, state))


def enabled(settings: Settings, environ: Mapping[str, str] = os.environ) -> bool:
    """Return whether this process traces: ``settings.traces``, else whether an OTLP endpoint is configured."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if settings.traces is not None:
        return settings.traces
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def provider(settings: Settings, service: str, exporter: SpanExporter | None = None) -> TracerProvider | None:
    """Return an SDK tracer provider for ``service`` exporting in batches over OTLP/HTTP, or None when off.

    ``exporter`` replaces the OTLP exporter (a test's in-memory one, exported synchronously). The provider is
    not made the global one: each component passes its tracer where spans are started, and shuts it down
    (flushing what is queued) as it stops.
    """
    if exporter is None and not enabled(settings):
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create({"service.name": service, "service.namespace": "arbiter"})
    tracers = TracerProvider(resource=resource)
    if exporter is not None:
        tracers.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        tracers.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return tracers


@lru_cache(maxsize=1)
def propagator() -> TraceContextTextMapPropagator:
    """Return the W3C Trace Context propagator (``traceparent``/``tracestate`` only: no baggage travels)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def current_headers() -> tuple[Header, ...]:
    """Return the trace context headers of the current span (``trace_headers`` of its W3C form); none outside one."""
    carrier: dict[str, str] = {}
    propagator().inject(carrier)
    parent = carrier.get(TRACEPARENT)
    state = carrier.get(TRACESTATE)
    return trace_headers(parent.encode("ascii") if parent else None, state.encode("ascii") if state else None)
