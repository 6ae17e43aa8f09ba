"""``PUT /rules`` (deploy the team's rules; scope ``arbiter:rules``) and ``GET /rules`` (the newest deployed version)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.callers.auth import RULES
from app.api.deps import CallerDep, ReaderDep
from app.api.problems import PROBLEM_RESPONSES, ApiError
from app.api.rules import RULES_VERSION_HEADER, RulesView
from app.rules.deploy import deploy

router = APIRouter(tags=["rules"])

RULES_MEDIA = ("application/json", "application/yaml", "application/x-yaml", "text/yaml")


def _view(request: Request) -> RulesView:
    view: RulesView = request.app.state.rules
    return view


@router.get("/rules", summary="The newest deployed rules: version, digest, who deployed it, and the document",
            responses={404: PROBLEM_RESPONSES[401] | {"description": "RULES_NOT_DEPLOYED"}})
async def get_rules(request: Request, reader: ReaderDep) -> JSONResponse:
    d = await _view(request).newest()
    if d is None:
        raise ApiError("no rules have been deployed", code="RULES_NOT_DEPLOYED")
    return JSONResponse({"version": d.version, "digest": d.digest, "deployed_by": d.principal,
                         "deployed_at": d.deployed_at.isoformat().replace("+00:00", "Z"), "document": d.document},
                        headers={RULES_VERSION_HEADER: str(d.version), "ETag": f'"{d.digest}"'})


@router.put("/rules", status_code=201,
            summary="Deploy a rules document (YAML or JSON) as the next version; scope arbiter:rules",
            responses={422: {"description": "RULES_INVALID: the document does not compile; `problems` lists why"},
                       409: {"description": "RULES_CONFLICT: a concurrent deploy took the version"},
                       403: PROBLEM_RESPONSES[401]})
async def put_rules(request: Request, caller: CallerDep) -> JSONResponse:
    caller.require(RULES)
    media = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if media not in RULES_MEDIA:
        raise ApiError(f"a rules document is sent as one of {', '.join(RULES_MEDIA)}, not {media}",
                       code="UNSUPPORTED_MEDIA_TYPE")
    body = await request.body()
    settings = request.app.state.settings
    done = await asyncio.to_thread(deploy, settings, body, principal=caller.principal, issuer=caller.issuer)
    _view(request).seen(done.deploy)
    d = done.deploy
    return JSONResponse({"version": d.version, "digest": d.digest, "deployed_by": d.principal, "new": done.new,
                         "control_records": {str(p): o for p, o in sorted(done.offsets.items())}},
                        status_code=201 if done.new else 200,
                        headers={RULES_VERSION_HEADER: str(d.version), "Location": "/rules"})
