"""Operations routes: ``/healthz`` (broker reachable, read model open, outcomes consumer alive) and ``/metrics``."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.deps import ContextDep
from app.api.models import Health
from app.api.read_model import read_model_ready

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health, "description": "Not healthy"}},
            summary="Is the broker reachable, the read model open and the outcomes consumer running?")
async def healthz(request: Request, ctx: ContextDep) -> JSONResponse:
    broker = await asyncio.to_thread(ctx.producer.broker_reachable)
    read_model = read_model_ready(request.app.state.read_model)
    consumer = request.app.state.outcome_consumer is not None and request.app.state.outcome_consumer.alive
    ok = broker and read_model and consumer
    return JSONResponse({"ok": ok, "broker": broker, "read_model": read_model, "outcomes_consumer": consumer},
                        status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, summary="Prometheus text exposition",
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}})
async def metrics(ctx: ContextDep) -> Response:
    ctx.metrics.cached.set(len(ctx.outcomes))
    return Response(ctx.metrics.render(), media_type=CONTENT_TYPE_LATEST)
