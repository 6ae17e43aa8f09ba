"""ASGI middleware refusing request bodies over their route's limit with a 413 problem.

``POST /commands:batch`` may send up to ``max_body_bytes``; every other route up to ``object_body_limit``: one
document and its envelope (``ARBITER_MAX_OBJECT_BODY_BYTES``). A declared ``Content-Length`` over the limit is
refused before any route runs; a chunked body (no ``Content-Length``) is counted as the route reads it, so it is
read no sooner than a declared one: after the route has checked the bearer token (``app.api.deps.authenticate``).
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import PROBLEM_JSON, ApiError

BATCH_PATH = "/commands:batch"


def object_body_limit(max_body_bytes: int, configured: int | None, max_document_bytes: int) -> int:
    """Return the body limit of every route but the batch route: one document plus 1 KiB, or as configured."""
    return min(max_body_bytes, configured if configured is not None else max_document_bytes + 1024)


class BodyTooLarge(ApiError):
    """A chunked body passed its route's limit while the route read it: 413 BODY_TOO_LARGE."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(f"the body exceeds the limit of {path}, {limit} bytes", code="BODY_TOO_LARGE")


class BodyLimit:
    """Declared sizes are checked up front; chunked bodies are counted as the route reads them, cut at the limit."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, other_routes_bytes: int | None = None) -> None:
        self.app = app
        self.batch_limit = max_body_bytes
        self.other_limit = min(max_body_bytes, other_routes_bytes or max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.batch_limit if scope["path"] == BATCH_PATH else self.other_limit
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                break
        if declared is not None and declared > limit:
            await self._refuse(scope, send, f"the body has {declared} bytes; the limit of {scope['path']} is {limit}")
            return
        if declared is not None or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)  # the server delivers no more than Content-Length
            return
        size, over, answered = 0, False, False

        async def counted() -> Message:
            nonlocal size, over
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > limit:
                    over = True
                    raise BodyTooLarge(scope["path"], limit)  # the routes answer it 413; so do we, below
            return message

        async def unless_over(message: Message) -> None:
            nonlocal answered
            if over and not answered:
                return  # whatever the app made of the cut body, the answer is the 413 below
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, unless_over)
        except BodyTooLarge:
            pass
        if over and not answered:
            await self._refuse(scope, send, f"the body exceeds the limit of {scope['path']}, {limit} bytes")

    async def _refuse(self, scope: Scope, send: Send, detail: str) -> None:
        body = json.dumps({"type": "urn:arbiter:problem:body-too-large", "title": "Request body too large",
                           "status": 413, "detail": detail, "code": "BODY_TOO_LARGE",
                           "instance": scope.get("path", "")}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
