"""``/asyncapi.json``: the AsyncAPI 3.0 document of Arbiter's topics (``app.contract.asyncapi``), open to anyone."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.api.routes.registry import PREFIX
from app.contract.asyncapi import document

router = APIRouter(tags=["contract"], include_in_schema=False)  # an AsyncAPI document, not an OpenAPI operation


@router.get("/asyncapi.json", summary="The AsyncAPI 3.0 document of the commands, events and rejections topics")
async def asyncapi(request: Request) -> dict[str, Any]:
    settings = request.app.state.settings
    registry = settings.schema_registry_url or settings.public_base_url + PREFIX  # never the request's Host
    return document(settings, registry)
