"""``GET /`` (the status page), ``/status.js``, ``/vendor/*`` (uPlot) and ``/status.json`` (its figures, scope arbiter:operate).

The page and its script are open; the figures need a bearer token with the scope ``arbiter:operate``: the
script takes it from the page's address (``/#token=<token>``) and keeps it in ``sessionStorage``. However many
clients poll, the figures are computed at most once per second (``app.api.writes.memo.Memo``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.deps import OperatorDep
from app.api.problems import PROBLEM_RESPONSES
from app.api.writes.memo import Memo

STATIC = Path(__file__).parents[2] / "status" / "static"  # app/status/static
router = APIRouter(tags=["status"])


@router.get("/", include_in_schema=False)
def status_page() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/status.js", include_in_schema=False)
def status_script() -> FileResponse:
    return FileResponse(STATIC / "status.js", media_type="text/javascript")


# The charting library, vendored (uPlot 1.6.32, MIT: vendor/uPlot.LICENSE): the page needs no network.
VENDORED = {"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}


@router.get("/vendor/{name}", include_in_schema=False)
def vendored(name: str) -> FileResponse:
    media = VENDORED.get(name)
    if media is None:
        raise StarletteHTTPException(404, f"no vendored file {name}")
    return FileResponse(STATIC / "vendor" / name, media_type=media, headers={"Cache-Control": "max-age=86400"})


def status_memo(snapshot: Callable[[], dict[str, Any]]) -> Memo[bytes]:
    """Return the memo that renders ``snapshot()`` (the collector's figures) as JSON at most once per second."""

    def render() -> bytes:
        return json.dumps(snapshot(), separators=(",", ":"), allow_nan=False).encode()

    return Memo(render, interval=1.0)


@router.get("/status.json", summary="Live figures of the pipeline (the status page's data); operators only",
            responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}},
                       401: PROBLEM_RESPONSES[401],
                       403: PROBLEM_RESPONSES[401] | {"description": "INSUFFICIENT_SCOPE: the token lacks arbiter:operate"}})
async def status_json(request: Request, operator: OperatorDep) -> Response:
    memo: Memo[bytes] = request.app.state.status_memo
    return Response(await memo.get(), media_type="application/json", headers={"Cache-Control": "no-store"})
