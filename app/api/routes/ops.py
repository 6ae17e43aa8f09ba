"""Operations routes: ``/healthz`` (open, cheap) and ``/metrics`` (Prometheus text; scopes arbiter:metrics/operate)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.deps import ContextDep, ScraperDep
from app.api.models import Health
from app.api.problems import PROBLEM_RESPONSES
from app.api.writes.memo import Memo

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health, "description": "Not healthy"}},
            summary="Is the broker reachable, the read model open, the outcomes consumer running and the claims reader "
                    "caught up?")
async def healthz(request: Request) -> JSONResponse:
    # Open to load balancers; the broker probe (a metadata request) runs at most once per second however
    # many clients poll.
    probe: Memo[bool] = request.app.state.broker_probe
    broker = await probe.get()
    # The read model's probe too (a query on PostgreSQL): at most once per second, never one per call competing
    # with reads for the pool.
    read_model_probe: Memo[bool] = request.app.state.read_model_probe
    read_model = await read_model_probe.get()
    oc = request.app.state.outcome_consumer
    if oc is not None:
        oc.ensure_running()
    consumer = oc is not None and oc.alive
    # the Idempotency-Keys' claims reader (app.api.writes.claims): keyed writes are 503 until it has caught up
    claims = request.app.state.claims.status() if getattr(request.app.state, "claims", None) is not None else None
    claims_ready = None if claims is None else bool(claims["ready"] and claims["alive"])
    ok = broker and read_model and consumer and claims_ready is not False
    return JSONResponse({"ok": ok, "broker": broker, "read_model": read_model, "outcomes_consumer": consumer,
                         "outcomes_consumer_restarts": oc.restarts if oc is not None else 0,
                         "outcomes_consumer_error": oc.last_error if oc is not None else None,
                         "claims_reader": claims_ready, "claims_lag": claims["lag"] if claims else None,
                         "claims_skipped": claims["skipped"] if claims else 0,
                         "claims_reader_error": claims["error"] if claims else None},
                        status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, summary="Prometheus text exposition; scope arbiter:metrics or arbiter:operate",
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}, 401: PROBLEM_RESPONSES[401],
                       403: PROBLEM_RESPONSES[401] | {
                           "description": "INSUFFICIENT_SCOPE: the token has neither arbiter:metrics nor arbiter:operate"}})
async def metrics(ctx: ContextDep, operator: ScraperDep) -> Response:
    ctx.metrics.gauges(len(ctx.outcomes), ctx.outcomes.nbytes, ctx.outcomes.waiting)
    return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)
