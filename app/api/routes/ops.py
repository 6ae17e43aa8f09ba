"""Operations routes: ``/healthz`` (open, cheap) and ``/metrics`` (Prometheus text, operators only)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from app.api.deps import ContextDep, OperatorDep
from app.api.memo import Memo
from app.api.models import Health
from app.api.problems import PROBLEM_RESPONSES
from app.api.read_model import read_model_ready

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health, "description": "Not healthy"}},
            summary="Is the broker reachable, the read model open and the outcomes consumer running?")
async def healthz(request: Request) -> JSONResponse:
    # Open to load balancers; the broker probe (a metadata request) runs at most once per second however
    # many clients poll.
    probe: Memo[bool] = request.app.state.broker_probe
    broker = await probe.get()
    rm = request.app.state.read_model
    read_model = await run_in_threadpool(read_model_ready, rm) if getattr(rm, "blocking", False) else read_model_ready(rm)
    consumer = request.app.state.outcome_consumer is not None and request.app.state.outcome_consumer.alive
    ok = broker and read_model and consumer
    return JSONResponse({"ok": ok, "broker": broker, "read_model": read_model, "outcomes_consumer": consumer},
                        status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, summary="Prometheus text exposition; operators only",
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}, 401: PROBLEM_RESPONSES[401],
                       403: PROBLEM_RESPONSES[401] | {"description": "The principal is not in ARBITER_OPERATORS"}})
async def metrics(ctx: ContextDep, operator: OperatorDep) -> Response:
    ctx.metrics.cached.set(len(ctx.outcomes))
    ctx.metrics.cached_bytes.set(ctx.outcomes.nbytes)
    ctx.metrics.waiting.set(ctx.outcomes.waiting)
    return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)
