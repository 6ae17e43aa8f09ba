"""``GET /`` (the status page), ``/status.js`` and ``/status.json`` (its figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

STATIC = Path(__file__).parent / "static"
router = APIRouter(tags=["status"])


@router.get("/", include_in_schema=False)
def status_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/status.js", include_in_schema=False)
def status_script() -> FileResponse:
    return FileResponse(STATIC / "status.js", media_type="text/javascript")


@router.get("/status.json", summary="Live figures of the pipeline (the status page's data)")
def status_json(request: Request) -> dict[str, Any]:
    return request.app.state.status.snapshot()  # type: ignore[no-any-return]
