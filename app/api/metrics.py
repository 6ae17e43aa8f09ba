"""Prometheus metrics of one API process: requests by route and status, produce latency, outcomes by reason."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from commands import Event, Rejection

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    """The process's metrics in their own registry (several apps in one test process do not collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("arbiter_api_requests", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.produce_seconds = Histogram("arbiter_api_produce_seconds",
                                         "Time from produce to broker acknowledgement, per request",
                                         ["kind"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.produced = Counter("arbiter_api_commands_produced", "Commands acknowledged by the broker",
                                registry=self.registry)
        self.produce_failures = Counter("arbiter_api_produce_failures", "Commands the broker did not acknowledge",
                                        ["code"], registry=self.registry)
        self.outcomes = Counter("arbiter_api_outcomes", "Outcomes seen on events/rejections: ACCEPTED or the reason",
                                ["outcome"], registry=self.registry)
        self.waits = Counter("arbiter_api_waits", "Prefer: wait requests by result: decided, timeout, refused "
                             "(over ARBITER_MAX_WAITERS)", ["result"], registry=self.registry)
        self.cached = Gauge("arbiter_api_outcomes_cached", "Command ids with outcomes held for GET /commands/{id}",
                            registry=self.registry)
        self.cached_bytes = Gauge("arbiter_api_outcomes_cached_bytes",
                                  "Estimated bytes of the outcome summaries held (bound: ARBITER_OUTCOME_CACHE_BYTES)",
                                  registry=self.registry)
        self.waiting = Gauge("arbiter_api_waiters", "Requests waiting for a decision (bound: ARBITER_MAX_WAITERS)",
                             registry=self.registry)

    def outcome(self, o: Event | Rejection) -> None:
        self.outcomes.labels("ACCEPTED" if isinstance(o, Event) else o.reason.value).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware counting every HTTP request by its route template (not its raw path) and status."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.requests.labels(template, scope["method"], str(status)).inc()
