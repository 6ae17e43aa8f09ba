"""CORS for browser pages on other origins: Starlette's ``CORSMiddleware`` with an explicit allow-list only.

``ARBITER_CORS_ALLOW_ORIGINS`` names the origins; empty (the default) installs nothing, so no cross-origin answer
carries ``Access-Control-Allow-Origin`` and a preflight is the 405 of any unknown method. No credentials mode:
pages authenticate with a bearer token (``fetch``) or a change-feed ticket (``EventSource``), never a cookie, so
a cross-site page cannot ride on a user's session.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from app.api.problems import problem
from app.settings import Settings

#: Request headers a page may send: the API's own (README "API") and W3C trace context.
ALLOW_HEADERS = ("Authorization", "Content-Type", "Idempotency-Key", "If-Match", "If-None-Match", "Prefer", "Cache-Control",
                 "Arbiter-Min-Position", "Last-Event-ID", "traceparent", "tracestate")
#: Answer headers a page may read besides the CORS-safelisted ones.
EXPOSE_HEADERS = ("ETag", "Location", "Arbiter-Position", "Retry-After", "RateLimit", "RateLimit-Policy",
                  "WWW-Authenticate", "Server-Timing")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
#: How long a browser may cache a preflight's answer (seconds).
MAX_AGE_S = 600


class ProblemCors(CORSMiddleware):
    """``CORSMiddleware`` whose refused preflight is a problem+json 400 like every other refusal of the API."""

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code == 400:
            kept = {k: v for k, v in answer.headers.items() if k.lower().startswith(("access-control-", "vary"))}
            return problem(400, "BAD_REQUEST", bytes(answer.body).decode(), headers=kept)
        return answer


def install(app: FastAPI, settings: Settings) -> None:
    """Add CORS for ``settings.cors_allow_origins``, outermost (a preflight is answered before anything else)."""
    if settings.cors_allow_origins:
        app.add_middleware(ProblemCors, allow_origins=list(settings.cors_allow_origins), allow_methods=list(METHODS),
                           allow_headers=list(ALLOW_HEADERS), expose_headers=list(EXPOSE_HEADERS),
                           allow_credentials=False, max_age=MAX_AGE_S)
