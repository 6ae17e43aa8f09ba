"""The FastAPI application factory: ``create_app(settings)`` wires producer, outcomes consumer and read model."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from app import traces
from app.api import problems
from app.api.callers.identity import build_verifier, local_issuer
from app.api.callers.secret_policy import require_usable_secret
from app.api.callers.tickets import TicketBook
from app.api.changes.fanout import ChangeFeed
from app.api.changes.roles import AuditRoles
from app.api.deps import ApiContext, ReadModelPort
from app.api.http import cors
from app.api.http.body_limit import BodyLimit, object_body_limit
from app.api.http.ticket_gate import TicketGate
from app.api.models import Problem
from app.api.reads.position import PositionWatch
from app.api.reads.read_model import HistoryFigures, open_read_model, read_model_ready
from app.api.routes import changes, commands, contract, identity, objects, ops, tickets
from app.api.routes import rules as rules_routes
from app.api.routes import status as status_routes
from app.api.rules import RulesView
from app.api.telemetry.metrics import ApiMetrics, RequestMetrics, mark_dead
from app.api.telemetry.traces import TraceWrites
from app.api.writes.claims import KeyClaims
from app.api.writes.fast_writes import FastWrites
from app.api.writes.memo import Memo
from app.api.writes.outcomes import OutcomeCache, OutcomeConsumer
from app.api.writes.producer import CommandProducer
from app.api.writes.quota import Quotas
from app.limits import for_settings
from app.read_models import audit_root
from app.rescale.generation import GenerationWatch
from app.settings import Settings
from app.status.collector import StatusCollector
from app.validator.murmur2 import partition_for
from projections.audit.outcomes import AuditOutcomes

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

DESCRIPTION = """\
Commands about shared objects go onto Kafka keyed by object id; a validator decides each one.
Writes answer **202** once the broker acknowledged the command (`Location: /commands/{id}`), or the
decision itself with `Prefer: wait=<seconds>`. Every error is `application/problem+json` with a `code`.
Authenticate with `Authorization: Bearer <JWT>` of a trusted OIDC issuer (or `arbiter token <principal>` in
development). Scopes: `arbiter:write` (create, update, delete), `arbiter:share` (grants), `arbiter:read`,
`arbiter:operate` (`/status.json`, `/metrics`), `arbiter:metrics` (`/metrics` only). Objects are read by their
owner, editors and readers only (a grantee `group:<name>` stands for the members of that group).
"""

#: Paths that need a bearer token (declared in the OpenAPI document).
_SECURED = ("/objects", "/commands", "/changes", "/status.json", "/metrics")
#: Paths that take a change-feed ticket instead (``app.api.http.ticket_gate``).
_TICKETED = ("/changes", "/objects/{object_id}/changes")


async def _set_gauges(metrics: ApiMetrics, outcomes: OutcomeCache) -> None:
    # Once a second, so a scrape that reaches another worker (which merges every worker's files) sees this one's
    # gauges at most a second old.
    while True:
        metrics.gauges(len(outcomes), outcomes.nbytes, outcomes.waiting)
        await asyncio.sleep(1.0)


def _claims_status(app: FastAPI) -> dict[str, Any] | None:
    claims = getattr(app.state, "claims", None)
    return claims.status() if claims is not None else None


def position_watch(settings: Settings, rm: ReadModelPort | None) -> PositionWatch | None:
    """Return the waits for ``rm``'s offsets on the events topic, or None if it keeps none (no read model)."""
    offsets = getattr(rm, "offsets", None)
    if offsets is None:
        return None
    topic = settings.topic_events
    return PositionWatch(lambda: {p: o for (t, p), o in offsets().items() if t == topic},
                         blocking=bool(getattr(rm, "blocking", False)))


def create_app(settings: Settings, *, read_model: ReadModelPort | None = None,
               tracer_provider: TracerProvider | None = None) -> FastAPI:
    """Return the API for ``settings``; the producer and the outcomes consumer start with the app's lifespan.

    Writes are traced (``app.api.telemetry.traces``) with ``tracer_provider``, else with the OTLP one ``app.traces.provider``
    makes when tracing is configured (shut down, flushing its spans, with the app).

    Refuses (``SetupError`` WEAK_SECRET) a placeholder or short secret unless development on loopback
    (``settings.api_host``; ``arbiter api`` puts its bind address there).
    """
    require_usable_secret(settings, settings.api_host)
    metrics = ApiMetrics()
    tracers = tracer_provider if tracer_provider is not None else traces.provider(settings, "arbiter-api")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The providers' keys are fetched before the first request, so it need not wait for them. Every fetch runs
        # on a worker thread (app.api.callers.jwks): a later one (expiry, an unknown kid) never holds the event loop.
        await asyncio.to_thread(app.state.verifier.warm)
        # The commands topic's generation (app.rescale): writes pause during a rescale and follow it after.
        app.state.generation = await asyncio.to_thread(lambda: GenerationWatch(
            settings, on_skip=lambda r, why: metrics.control_skipped.labels(r.topic).inc()).start())
        app.state.status.follow(app.state.generation)  # lag and hot keys per partition of the current generation
        app.state.producer = CommandProducer(settings, traced=tracers is not None, generation=app.state.generation)
        app.state.broker_probe = Memo(app.state.producer.broker_reachable, interval=1.0)
        app.state.outcome_consumer = OutcomeConsumer(
            settings.kafka_bootstrap, [settings.topic_events, settings.topic_rejections], settings.partitions,
            app.state.outcomes, settings.kafka_config)
        owned = read_model is None
        app.state.read_model = read_model if read_model is not None else open_read_model(settings)
        app.state.positions = position_watch(settings, app.state.read_model)
        app.state.durable_outcomes = AuditOutcomes(audit_root(settings))
        # the pre-check of a patch learns the object's type and owner from the audit trail (app.api.rules)
        app.state.rules.latest = partial(app.state.durable_outcomes.latest_event, events_topic=settings.topic_events)
        # one principal's Idempotency-Key names one object, across workers and restarts (app.api.writes.claims)
        app.state.claims = await asyncio.to_thread(
            KeyClaims, settings, lambda topic: metrics.control_skipped.labels(topic).inc())
        app.state.ctx = ApiContext(settings, app.state.producer, app.state.outcomes, metrics, app.state.quotas,
                                   app.state.rules, app.state.claims)
        app.state.status.start_sampling()  # the status page's charts: a point a second whether or not anyone looks
        gauges = asyncio.create_task(_set_gauges(metrics, app.state.outcomes))
        try:
            yield
        finally:
            gauges.cancel()
            app.state.generation.stop()
            mark_dead(os.getpid())  # its live gauges leave the merged /metrics of `arbiter api --workers N`
            app.state.outcome_consumer.close()
            app.state.claims.close()
            app.state.status.close()
            left = app.state.producer.close()
            if left:
                log.error("%d commands were still unacknowledged at shutdown", left)
            app.state.durable_outcomes.close()
            app.state.history_figures.close()
            await asyncio.to_thread(app.state.changes.close)
            app.state.changes.book.source.close()
            if tracers is not None and tracer_provider is None:
                tracers.shutdown()
            if owned and app.state.read_model is not None and hasattr(app.state.read_model, "close"):
                app.state.read_model.close()

    # redirect_slashes=False: "/objects/" is a 404 problem, not a 307 to a route the client did not ask for
    app = FastAPI(title="Arbiter Command API", version="1", description=DESCRIPTION, lifespan=lifespan,
                  redirect_slashes=False)
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.local_issuer = local_issuer(settings) if settings.trusts_local_issuer else None
    app.state.verifier = build_verifier(settings)
    app.state.status = StatusCollector(settings)
    history_figures = app.state.history_figures = HistoryFigures(settings)
    app.state.changes = ChangeFeed(
        settings.kafka_bootstrap, settings.topic_events,
        AuditRoles(audit_root(settings), wait_s=settings.changes_roles_wait_s),
        max_subscribers=settings.changes_max_subscribers, max_per_principal=settings.changes_max_per_principal,
        max_queue=settings.changes_queue_events, retry_after_s=settings.retry_after_s,
        kafka_config=settings.kafka_config, max_roles=settings.changes_roles_cache,
        max_queue_bytes=settings.changes_queue_bytes, max_total_bytes=settings.changes_total_bytes)
    app.state.status_memo = status_routes.status_memo(
        lambda: {**app.state.status.snapshot(), "read_model_history": history_figures(),
                 "change_subscribers": app.state.changes.subscribers, "claims": _claims_status(app)})

    def on_outcome(outcome: Any) -> None:  # noqa: ANN401 - Event | Rejection
        ruled = outcome.rules_version is not None and outcome.object_id is not None
        partitions = app.state.status.current_settings().partitions  # the current generation's (app.rescale)
        metrics.outcome(outcome, partition_for(outcome.object_id.encode(), partitions) if ruled else None)
        app.state.status.observe(outcome)

    app.state.outcomes = OutcomeCache(max_bytes=settings.outcome_cache_bytes, max_entries=settings.outcome_cache_size,
                                      max_waiters=settings.max_waiters, on_outcome=on_outcome,
                                      waiter_share=settings.waiter_share, share=settings.outcome_cache_share)
    app.state.quotas = Quotas(write_rate=settings.write_rate, write_burst=settings.write_burst,
                              read_rate=settings.read_rate, read_burst=settings.read_burst,
                              max_principals=settings.rate_principals)
    app.state.read_model = read_model
    app.state.positions = None
    app.state.read_model_probe = Memo(lambda: read_model_ready(app.state.read_model), interval=1.0)
    app.state.outcome_consumer = None
    app.state.rules = RulesView(settings, on_skip=lambda r, why: metrics.control_skipped.labels(r.topic).inc())
    problems.install(app)
    app.include_router(tickets.router)
    app.include_router(changes.router)  # before objects: /objects/{id}/changes is not an object id
    app.include_router(objects.router)
    app.include_router(commands.router)
    app.include_router(ops.router)
    app.include_router(status_routes.router)
    app.include_router(identity.router)
    app.include_router(rules_routes.router)
    contract.mount(app)  # /registry (read-only schema registry) and /asyncapi.json
    app.add_middleware(FastWrites, enabled=settings.api_fast_writes)  # inside the metrics and the body limit
    app.add_middleware(RequestMetrics, metrics=metrics)
    app.add_middleware(BodyLimit, max_body_bytes=settings.max_body_bytes, other_routes_bytes=object_body_limit(
        settings.max_body_bytes, settings.max_object_body_bytes, for_settings(settings).max_document_bytes))
    app.state.tickets = TicketBook(settings.auth_secret.get_secret_value(),
                                   settings.path(settings.var_dir) / "change-tickets",
                                   ttl_s=settings.changes_ticket_ttl_s, resume_s=settings.changes_ticket_resume_s)
    app.add_middleware(TicketGate, book=app.state.tickets)  # before anything reads the query (or logs it)
    if tracers is not None:  # a write's span covers all of it
        app.add_middleware(TraceWrites, tracer=tracers.get_tracer("arbiter.api"))
    cors.install(app, settings)  # outermost: a preflight is answered before anything else

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            schemas["Problem"] = Problem.model_json_schema()
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
            schema["components"]["securitySchemes"] = {"bearer": {
                "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "A JWT of a trusted issuer; `arbiter token <principal>` prints a development one."}}
            schema["components"]["securitySchemes"]["ticket"] = {
                "type": "apiKey", "in": "query", "name": "ticket",
                "description": "A change-feed ticket of POST /changes/tickets: GET /changes and "
                               "GET /objects/{object_id}/changes only (for a browser's EventSource)."}
            for path, item in schema["paths"].items():
                if path.startswith(_SECURED):
                    for op in item.values():
                        op["security"] = [{"bearer": []}]
                        if path in _TICKETED:
                            op["security"].append({"ticket": []})
                        op["responses"].update({str(k): v for k, v in problems.PROBLEM_RESPONSES.items()
                                                if str(k) not in op["responses"] or k == 422})
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
