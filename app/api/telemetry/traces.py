"""The span of each write: ASGI middleware continuing the caller's W3C trace context, installed only when tracing.

A write is a ``POST``, ``PUT``, ``PATCH`` or ``DELETE`` under ``/objects`` or ``/commands``, whichever path serves it
(``app.api.writes.fast_writes`` or the FastAPI routes: both run inside this middleware). Its span is a ``SERVER`` span,
child of the request's ``traceparent``/``tracestate`` when they are well formed (else the root of a new trace),
current while the write runs, so the producer stores its context on the command record (``app.api.writes.producer``,
``app.traces``). Off (``app.traces.enabled``), the middleware is not installed and nothing here runs.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode, Tracer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.traces import TRACEPARENT, TRACESTATE, propagator
from commands import Command

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WRITE_PATHS = ("/objects", "/commands")
_CONTEXT_HEADERS = {TRACEPARENT.encode(): TRACEPARENT, TRACESTATE.encode(): TRACESTATE}


class TraceWrites:
    """Run each write inside a span of ``tracer``; pass everything else through untouched."""

    def __init__(self, app: ASGIApp, *, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITE_METHODS or not scope["path"].startswith(WRITE_PATHS):
            await self.app(scope, receive, send)
            return
        carrier: dict[str, str] = {}
        for name, value in scope["headers"]:
            header = _CONTEXT_HEADERS.get(name)
            if header is not None and header not in carrier:
                carrier[header] = value.decode("latin-1")
        parent = propagator().extract(carrier) if carrier else None
        method = scope["method"]
        with self.tracer.start_as_current_span(method, context=parent, kind=SpanKind.SERVER, attributes={
                "http.request.method": method, "url.path": scope["path"]}) as span:

            async def answer(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(StatusCode.ERROR)
                await send(message)

            await self.app(scope, receive, answer)
            route = getattr(scope.get("route"), "path", None)
            if route:
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)

def note_command(cmd: Command) -> None:
    """Put ``cmd``'s ids on the current span (the write's), for finding a command's trace by its id."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({"arbiter.command_id": cmd.command_id, "arbiter.object_id": cmd.object_id,
                             "arbiter.command": type(cmd).__name__, "enduser.id": cmd.principal})
