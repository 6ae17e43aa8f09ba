"""The hot write routes answered as plain ASGI: ``POST /objects``, ``PATCH /objects/{id}``, ``DELETE /objects/{id}``.

Why: a single write spent ~60 % of the API's ~430 µs of CPU in FastAPI's and Starlette's generic machinery
(routing, dependency solving, request objects, validation plumbing), measured with py-spy (issue 25). This middleware
takes the common case of those three routes past it, with the same parts the FastAPI routes use: the bearer token
checked first (``auth.authenticate_bearer``), the strict body parse (``json_body.parse_body``), the same pydantic
models, the same command builders and ``submit`` (quotas, waiter shares, produce, ``Prefer: wait``), and the same
problem rendering (``problems.arbiter_error``).

Anything it does not recognise as the common case goes on to the FastAPI route, which then answers exactly as it
always has: a header that breaks its pattern, a body that is not ``application/json`` (or ``+json``), an empty body,
a body the model refuses (422 with FastAPI's ``errors`` list). What it learnt on the way travels in the ASGI scope
(the principal, the parsed body), so the token is verified once and the body parsed once either way. The FastAPI
routes stay the OpenAPI document's source and the behaviour's reference: ``ARBITER_API_FAST_WRITES=false`` turns
this off, and ``tests/unit/test_api_fast_writes.py`` holds both to the same answers.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.callers.auth import authenticate_bearer
from app.api.deps import CALLER_SCOPE_KEY, refuse_if_over_rate
from app.api.http import json_body
from app.api.http.json_body import BODY_SCOPE_KEY, JSON_SCOPE_KEY, is_json
from app.api.models import IDEMPOTENCY_KEY_PATTERN, OBJECT_ID_PATTERN, CreateRequest, Document
from app.api.problems import arbiter_error
from app.api.writes.submit import (
    IF_MATCH_PATTERN,
    create_command,
    delete_command,
    for_caller,
    prefer_wait,
    submit,
    update_command,
)
from commands import Command
from commands.errors import ArbiterError

_OBJECT_PATH = re.compile(r"^/objects/([^/]+)$")
_OBJECT_ID = re.compile(OBJECT_ID_PATTERN)
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_IF_MATCH = re.compile(IF_MATCH_PATTERN)
_DOCUMENT: TypeAdapter[dict[str, Any]] = TypeAdapter(Document)
#: The FastAPI route templates this middleware answers for, by (method, template).
_TEMPLATES = {("POST", "/objects"), ("PATCH", "/objects/{object_id}"), ("DELETE", "/objects/{object_id}")}


class _NotCommon(Exception):
    """The request is not the common case: the FastAPI route answers it."""


class FastWrites:
    """ASGI middleware serving the common case of the three hot write routes; everything else passes through."""

    def __init__(self, app: ASGIApp, *, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled
        self._routes: dict[tuple[str, str], BaseRoute] | None = None

    def _route(self, scope: Scope, method: str, template: str) -> BaseRoute | None:
        # The FastAPI route object, so the request metrics name the same template whichever path answered.
        if self._routes is None:
            self._routes = {}
            self._collect(scope["app"].routes)
        return self._routes.get((method, template))

    def _collect(self, routes: list[BaseRoute]) -> None:
        assert self._routes is not None
        for route in routes:
            inner = getattr(route, "original_router", None)  # FastAPI >= 0.165 wraps included routers
            if inner is not None:
                self._collect(inner.routes)
                continue
            for m in getattr(route, "methods", None) or ():
                if (m, getattr(route, "path", None)) in _TEMPLATES:
                    self._routes[(m, route.path)] = route  # type: ignore[attr-defined]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.enabled or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        object_id: str | None = None
        if path == "/objects":
            if method != "POST":
                await self.app(scope, receive, send)
                return
            template = "/objects"
        else:
            m = _OBJECT_PATH.fullmatch(path) if method in ("PATCH", "DELETE") else None
            if m is None or not _OBJECT_ID.fullmatch(m.group(1)):
                await self.app(scope, receive, send)
                return
            object_id, template = m.group(1), "/objects/{object_id}"
        route = self._route(scope, method, template)
        if route is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = route
        try:
            await self._serve(scope, receive, send, method, object_id)
        except _NotCommon:
            await self.app(scope, self._replay(scope, receive), send)
        except ArbiterError as e:
            await arbiter_error(Request(scope), e)(scope, receive, send)

    @staticmethod
    def _replay(scope: Scope, receive: Receive) -> Receive:
        body: bytes | None = scope.get(BODY_SCOPE_KEY)
        if body is None:
            return receive

        async def replay() -> Message:
            nonlocal body
            if body is None:
                return await receive()
            message = {"type": "http.request", "body": body, "more_body": False}
            body = None
            return message

        return replay

    async def _serve(self, scope: Scope, receive: Receive, send: Send, method: str, object_id: str | None) -> None:
        authorization = content_type = idempotency_key = if_match = None
        prefer: list[str] = []
        for name, raw in scope["headers"]:
            if name == b"authorization":
                authorization = raw.decode("latin-1") if authorization is None else authorization
            elif name == b"content-type":
                content_type = raw.decode("latin-1") if content_type is None else content_type
            elif name == b"idempotency-key":
                idempotency_key = raw.decode("latin-1") if idempotency_key is None else idempotency_key
            elif name == b"if-match":
                if_match = raw.decode("latin-1") if if_match is None else if_match
            elif name == b"prefer":
                prefer.append(raw.decode("latin-1"))
        # the token before anything else, as on the FastAPI routes: no valid token, no body read
        state = scope["app"].state
        caller = await authenticate_bearer(authorization, state.verifier)
        scope[CALLER_SCOPE_KEY] = caller
        principal = caller.principal
        refuse_if_over_rate(state, principal)  # as the routes do: an over-rate principal's body is never read
        if (idempotency_key is not None and not _IDEMPOTENCY_KEY.fullmatch(idempotency_key)) or (
                if_match is not None and not _IF_MATCH.fullmatch(if_match)):
            raise _NotCommon
        cmd: Command
        if method == "DELETE":
            assert object_id is not None
            cmd = delete_command(principal, object_id, idempotency_key, if_match)
        else:
            if not is_json(content_type):
                raise _NotCommon
            body = await _read_body(receive)
            scope[BODY_SCOPE_KEY] = body
            if not body:
                raise _NotCommon
            value = json_body.parse_body(body)  # 400/422 ApiError: answered as the FastAPI route answers it
            scope[JSON_SCOPE_KEY] = value
            try:
                if object_id is None:
                    cmd = create_command(principal, CreateRequest.model_validate(value), idempotency_key, if_match)
                else:
                    cmd = update_command(principal, object_id, _DOCUMENT.validate_python(value), idempotency_key,
                                         if_match)
            except ValidationError as e:
                raise _NotCommon from e
        cmd = for_caller(cmd, caller)  # 403 INSUFFICIENT_SCOPE, as on the routes; groups, issuer, jti copied in
        ctx = state.ctx
        response = await submit(cmd, ctx, prefer_wait(prefer, ctx.settings.wait_max_s),
                                keyed=idempotency_key is not None)
        await response(scope, receive, send)


async def _read_body(receive: Receive) -> bytes:
    # ``BodyLimit`` (outside this middleware) already held the body to the route's limit.
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect  # as Starlette's Request.body does
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
