"""Request bodies are RFC 8259 JSON or refused: the parse every JSON route uses instead of Starlette's ``json.loads``.

``json.loads`` takes ``NaN``, ``Infinity``, numbers beyond a double (``1e400`` becomes ``inf``) and escaped lone
surrogates; the first two could never be served back as JSON and a lone surrogate made the answer a plain-text
500. The rule is ``commands.json_text`` (the validator applies the same one to documents and patches):

- not UTF-8, or not JSON at all: 400 ``INVALID_JSON``, as before;
- NaN/Infinity/out-of-range numbers, lone surrogates, nesting deeper than the body's envelope plus
  ``DEFAULT_MAX_DEPTH``: 422 ``INVALID_REQUEST``; documents and patches themselves are held to exactly
  ``DEFAULT_MAX_DEPTH`` levels by their model (``app.api.models.Document``).

Every route with a body needs a bearer token, and the token is checked first (``app.api.deps.authenticate``):
a request without a valid one is ``401`` before a byte of its body is read. The parse runs before FastAPI's own
body handling (whose catch-all turns any error into a 400) and leaves the parsed value where ``Request.json``
finds it, so the body is parsed once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from app.api.body_limit import BATCH_PATH
from app.api.deps import authenticate, refuse_if_over_rate
from app.api.problems import ApiError
from commands.json_text import DEFAULT_MAX_DEPTH, value_problem

#: Levels a document may sit below a body's top: ``{"commands": [{"document": {...}}]}`` is the deepest envelope.
ENVELOPE_DEPTH = 3


def parse_body(raw: bytes) -> Any:  # noqa: ANN401 - any JSON value
    """Return the JSON value of ``raw``; raise a 400 or 422 ``ApiError`` if it is not RFC 8259 JSON Arbiter keeps."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(f"the request body is not UTF-8 (byte {e.start})", code="INVALID_JSON",
                       errors=[{"loc": ["body", e.start], "msg": "not UTF-8", "type": "json_invalid"}]) from e
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError("the request body is not valid JSON", code="INVALID_JSON",
                       errors=[{"loc": ["body", e.pos], "msg": e.msg, "type": "json_invalid"}]) from e
    except RecursionError as e:  # json.loads recurses once per level: far deeper than any limit
        raise _not_rfc8259(f"JSON nesting deeper than {DEFAULT_MAX_DEPTH} levels") from e
    except ValueError as e:  # e.g. an integer over Python's 4300-digit conversion limit
        raise _not_rfc8259(f"JSON number out of range ({e})") from e
    problem = value_problem(value, DEFAULT_MAX_DEPTH + ENVELOPE_DEPTH)
    if problem is not None:
        raise _not_rfc8259(problem)
    return value


def _not_rfc8259(problem: str) -> ApiError:
    return ApiError(f"the request body is not JSON Arbiter can store: {problem}", code="INVALID_REQUEST",
                    errors=[{"loc": ["body"], "msg": problem, "type": "json_not_rfc8259"}])


def is_json(content_type: str | None) -> bool:
    # The media types FastAPI parses as JSON: application/json and application/*+json.
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


#: Bodies larger than this are parsed on a worker thread: the event loop keeps its turns (GIL switch interval)
#: while a batch's megabyte is parsed, instead of stalling every other request for the whole parse.
OFF_LOOP_BYTES = 64 * 1024


#: Where ``app.api.fast_writes`` leaves a body it read, and its parsed value, before handing the request on.
BODY_SCOPE_KEY = "arbiter.body"
JSON_SCOPE_KEY = "arbiter.json"


class _StrictJsonRequest(Request):
    async def json(self) -> Any:  # noqa: ANN401 - any JSON value
        if not hasattr(self, "_json") and JSON_SCOPE_KEY in self.scope:
            self._json = self.scope[JSON_SCOPE_KEY]  # parsed once, by the fast path
        if not hasattr(self, "_json"):
            raw = await self.body()
            self._json = await run_in_threadpool(parse_body, raw) if len(raw) > OFF_LOOP_BYTES else parse_body(raw)
        return self._json


class StrictJsonRoute(APIRoute):
    """An ``APIRoute`` whose JSON body is parsed by ``parse_body``, its refusals answered as problems."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict(request: Request) -> Response:
            principal = (await authenticate(request)).principal  # before the body: no token, no read (issue 25)
            if request.scope["path"] != BATCH_PATH:  # a single write: no token, no body read either
                refuse_if_over_rate(request.app.state, principal)
            request = _StrictJsonRequest(request.scope, request.receive)
            if is_json(request.headers.get("content-type")) and await request.body():
                await request.json()  # here, outside FastAPI's body handling, so an ApiError keeps its status
            return await handler(request)

        return strict
