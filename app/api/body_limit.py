"""ASGI middleware refusing request bodies over their route's limit with a 413 problem before any route runs.

``POST /commands:batch`` may send up to ``max_body_bytes``; every other route up to ``object_body_limit``: one
document and its envelope (``ARBITER_MAX_OBJECT_BODY_BYTES``).
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import PROBLEM_JSON

BATCH_PATH = "/commands:batch"


def object_body_limit(max_body_bytes: int, configured: int | None, max_document_bytes: int) -> int:
    """Return the body limit of every route but the batch route: one document plus 1 KiB, or as configured."""
    return min(max_body_bytes, configured if configured is not None else max_document_bytes + 1024)


class BodyLimit:
    """Declared sizes are checked up front; chunked bodies are read up to the limit, then replayed to the app."""

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
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await self._refuse(scope, send, f"the body exceeds the limit of {scope['path']}, {limit} bytes")
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send, detail: str) -> None:
        body = json.dumps({"type": "urn:arbiter:problem:body-too-large", "title": "Request body too large",
                           "status": 413, "detail": detail, "code": "BODY_TOO_LARGE",
                           "instance": scope.get("path", "")}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
