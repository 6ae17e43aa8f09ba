"""Arbiter's development issuer, published for anyone who checks its tokens: discovery document and JWKS (open)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.local_issuer import LocalIssuer
from app.api.problems import ApiError

router = APIRouter(prefix="/.well-known", tags=["identity"])


def _issuer(request: Request) -> LocalIssuer:
    issuer: LocalIssuer | None = request.app.state.local_issuer
    if issuer is None:
        raise ApiError("this API does not issue tokens (ARBITER_LOCAL_ISSUER is off)", code="ROUTE_NOT_FOUND")
    return issuer


@router.get("/openid-configuration", summary="OIDC discovery document of Arbiter's development issuer")
async def openid_configuration(request: Request) -> JSONResponse:
    # ARBITER_PUBLIC_URL, never the request's Host: a forged Host must not reach a cached discovery document
    return JSONResponse(_issuer(request).discovery(request.app.state.settings.public_base_url))


@router.get("/jwks.json", summary="Public keys of Arbiter's development issuer (JWK Set)")
async def jwks(request: Request) -> JSONResponse:
    return JSONResponse(_issuer(request).jwks(), headers={"Cache-Control": "max-age=60"})
