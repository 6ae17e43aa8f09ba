"""Prometheus metrics of the API: requests by route and status, produce latency, outcomes by reason.

With ``arbiter api --workers N`` every worker writes its figures to ``PROMETHEUS_MULTIPROC_DIR`` (a fresh directory
``arbiter api`` makes before the workers start: prometheus_client's multiprocess mode) and a scrape of any worker
merges all of them: counters and histograms summed over every worker that ever ran, gauges summed over the live
ones. Without that variable (one process) the process's own registry is served.
"""

from __future__ import annotations

import glob
import os
import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from commands import Event, Rejection

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    """The process's metrics in their own registry (several apps in one test process do not collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("arbiter_api_requests", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.control_skipped = Counter("arbiter_api_control_records_skipped",
                                       "Records on the rules catalog, generations or claims topic that count for nothing "
                                       "(unsigned, forged, oversized, unparsable, replayed), by topic",
                                       ["topic"], registry=self.registry)
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
                             "(over ARBITER_MAX_WAITERS), over_share (the principal's share of them: answered 202)",
                             ["result"], registry=self.registry)
        self.rate_limited = Counter("arbiter_api_rate_limited", "Requests refused 429 RATE_LIMITED, by policy: "
                                    "writes or reads", ["policy"], registry=self.registry)
        self.rule_rejections = Counter("arbiter_api_rule_rejections", "Rejections by a rule of the team's rules "
                                       "(RULE_VIOLATED, RULE_ERROR) seen on the rejections topic, by rule and version",
                                       ["rule", "rules_version"], registry=self.registry)
        self.rule_warnings = Counter("arbiter_api_rule_warnings", "Accepted commands a rule in warn or audit mode "
                                     "would have refused, seen on the events topic, by rule, version and mode",
                                     ["rule", "rules_version", "mode"], registry=self.registry)
        self.rules_version = Gauge("arbiter_rules_version", "The newest rules version a decision of each commands "
                                   "partition named (0: none yet), as seen on the events/rejections topics",
                                   ["partition"], registry=self.registry, multiprocess_mode="livemax")
        self._rules_seen: dict[int, int] = {}
        # gauges: summed over the live workers in multiprocess mode (each worker holds its own cache and waiters)
        self.cached = Gauge("arbiter_api_outcomes_cached", "Command ids with outcomes held for GET /commands/{id}",
                            registry=self.registry, multiprocess_mode="livesum")
        self.cached_bytes = Gauge("arbiter_api_outcomes_cached_bytes",
                                  "Estimated bytes of the outcome summaries held (bound: ARBITER_OUTCOME_CACHE_BYTES)",
                                  registry=self.registry, multiprocess_mode="livesum")
        self.waiting = Gauge("arbiter_api_waiters", "Requests waiting for a decision (bound: ARBITER_MAX_WAITERS)",
                             registry=self.registry, multiprocess_mode="livesum")

    def gauges(self, cached: int, cached_bytes: int, waiting: int) -> None:
        """Set the outcome cache's and waiters' gauges (at each scrape, and once a second by every worker)."""
        self.cached.set(cached)
        self.cached_bytes.set(cached_bytes)
        self.waiting.set(waiting)

    def outcome(self, o: Event | Rejection, partition: int | None = None) -> None:
        self.outcomes.labels("ACCEPTED" if isinstance(o, Event) else o.reason.value).inc()
        if o.rules_version is not None:
            if isinstance(o, Rejection) and o.rule is not None:
                self.rule_rejections.labels(o.rule, str(o.rules_version)).inc()
            elif isinstance(o, Event):
                for w in o.warnings:
                    self.rule_warnings.labels(w.rule, str(o.rules_version), w.mode).inc()
            if partition is not None and o.rules_version > self._rules_seen.get(partition, 0):
                self._rules_seen[partition] = o.rules_version
                self.rules_version.labels(str(partition)).set(o.rules_version)

    def render(self) -> bytes:
        """The exposition of this process, or of every worker's when in multiprocess mode."""
        path = multiprocess_dir()
        if path is None:
            return generate_latest(self.registry)
        _forget_dead_workers(path)
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path)
        return generate_latest(merged)


def multiprocess_dir() -> str | None:
    """The directory the workers' figures are merged from, or None for one process."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db$")


def _forget_dead_workers(path: str) -> None:
    # A worker that exits cleanly marks itself dead (create_app's lifespan); one that was killed cannot, so its
    # live gauges would be summed for ever: any scrape drops those of a process that no longer exists.
    for name in glob.glob(os.path.join(path, "gauge_live*.db")):
        m = _LIVE_GAUGE_FILE.search(name)
        if m and not _alive(int(m.group(1))):
            multiprocess.mark_process_dead(int(m.group(1)), path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_dead(pid: int) -> None:
    """Drop this worker's live gauges from the merged view (at its shutdown); a no-op in one process."""
    path = multiprocess_dir()
    if path is not None:
        multiprocess.mark_process_dead(pid, path)


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
