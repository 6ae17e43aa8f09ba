"""Command routes: ``POST /commands:batch`` for bulk clients and ``GET /commands/{id}`` for outcomes."""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from app.api.deps import ContextDep, PrincipalDep
from app.api.json_body import StrictJsonRoute
from app.api.models import (
    BatchCreate,
    BatchDelete,
    BatchGrant,
    BatchGrantReader,
    BatchItem,
    BatchRequest,
    BatchResponse,
    BatchRevoke,
    BatchRevokeReader,
    BatchUpdate,
    CommandOutcome,
    compact_json,
)
from app.api.problems import PROBLEM_RESPONSES, ApiError
from app.api.producer import Delivered
from app.api.submit import new_object_id, now
from app.errors import BrokerUnavailable
from commands import (
    Command,
    CreateObject,
    DeleteObject,
    GrantEditor,
    GrantReader,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
)
from schemas import codec

router = APIRouter(prefix="/commands", tags=["commands"], route_class=StrictJsonRoute)


def _command(item: BatchItem, principal: str, issued_at: Any) -> Command:
    cid = item.idempotency_key or str(uuid.uuid4())
    ev = item.expected_version
    if isinstance(item, BatchCreate):
        return CreateObject(cid, item.object_id or new_object_id(principal, cid), principal, issued_at, ev,
                            document=compact_json(item.document))
    if isinstance(item, BatchUpdate):
        return UpdateObject(cid, item.object_id, principal, issued_at, ev, patch=compact_json(item.patch))
    if isinstance(item, BatchDelete):
        return DeleteObject(cid, item.object_id, principal, issued_at, ev)
    if isinstance(item, BatchGrant):
        return GrantEditor(cid, item.object_id, principal, issued_at, ev, editor=item.editor)
    if isinstance(item, BatchRevoke):
        return RevokeEditor(cid, item.object_id, principal, issued_at, ev, editor=item.editor)
    if isinstance(item, BatchGrantReader):
        return GrantReader(cid, item.object_id, principal, issued_at, ev, reader=item.reader)
    assert isinstance(item, BatchRevokeReader)
    return RevokeReader(cid, item.object_id, principal, issued_at, ev, reader=item.reader)


@router.post(":batch", response_model=BatchResponse, status_code=202,
             responses={**PROBLEM_RESPONSES, 503: PROBLEM_RESPONSES[503] | {
                 "description": "Some commands were not stored: `results` says which; retry those with their ids"}},
             summary="Queue many commands in one request; one result per command, in order")
async def batch(body: BatchRequest, principal: PrincipalDep, ctx: ContextDep) -> JSONResponse:
    settings, producer, metrics = ctx.settings, ctx.producer, ctx.metrics
    if len(body.commands) > settings.batch_max_commands:
        raise ApiError(f"{len(body.commands)} commands; the limit is {settings.batch_max_commands}",
                       code="BODY_TOO_LARGE")
    issued_at = now()
    cmds = [_command(item, principal, issued_at) for item in body.commands]
    encode = codec.encode_command
    start = time.perf_counter()
    delivered = await producer.send_many([(c.object_id, encode(c)) for c in cmds])
    metrics.produce_seconds.labels("batch").observe(time.perf_counter() - start)
    results: list[dict[str, Any]] = []
    failed = 0
    for c, d in zip(cmds, delivered, strict=True):
        if isinstance(d, Delivered):
            results.append({"command_id": c.command_id, "object_id": c.object_id, "status": 202,
                            "partition": d.partition, "offset": d.offset})
        else:
            failed += 1
            metrics.produce_failures.labels(d.code).inc()
            status = 503 if isinstance(d, BrokerUnavailable) else 413
            results.append({"command_id": c.command_id, "object_id": c.object_id, "status": status,
                            "error": d.message})
    metrics.produced.inc(len(cmds) - failed)
    if failed:
        raise ApiError(f"{failed} of {len(cmds)} commands were not stored; retry them with their command ids as "
                       "idempotency keys", code="BROKER_UNAVAILABLE",
                       headers={"Retry-After": str(settings.retry_after_s)}, results=results)
    return JSONResponse({"results": results}, status_code=202)


@router.get("/{command_id}", response_model=CommandOutcome,
            responses={401: PROBLEM_RESPONSES[401],
                       404: PROBLEM_RESPONSES[401] | {"description": "Outcome not known to this process (yet)"}},
            summary="The outcome of one of the caller's commands, once this API process has seen it")
async def command_outcome(command_id: Annotated[str, Path(max_length=200)], principal: PrincipalDep,
                          ctx: ContextDep) -> JSONResponse:
    # Keyed by (principal, command id): another principal's command is exactly as unknown as no command.
    o = ctx.outcomes.lookup(principal, command_id)
    if o is None:
        raise ApiError(f"no outcome known for command {command_id!r}: not decided yet, or decided before this "
                       "API process started or longer ago than its cache holds", code="NOT_FOUND")
    body = {"command_id": command_id, "object_id": o.object_id, "status": o.kind, "version": o.version,
            "event": o.event, "reason": o.reason, "message": o.message}
    return JSONResponse(body, headers={"ETag": f'"{o.version}"'} if o.kind == "accepted" else None)
