"""RFC 9457 problem details: the one place where error codes become HTTP statuses and problem+json bodies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.api.callers.auth import InsufficientScope, Unauthorized
from app.api.writes.summary import OutcomeSummary
from commands.errors import ArbiterError, ReasonCode

PROBLEM_JSON = "application/problem+json"

#: Every code an answer can carry and its HTTP status: the domain's reason codes and the API's own.
STATUS: dict[str, int] = {
    ReasonCode.ALREADY_EXISTS: 409,
    ReasonCode.VERSION_CONFLICT: 409,  # 412 instead when the client sent If-Match (see status_of)
    ReasonCode.NOT_FOUND: 404,
    ReasonCode.DELETED: 410,
    ReasonCode.FORBIDDEN: 403,
    ReasonCode.DUPLICATE: 409,
    ReasonCode.TOO_LARGE: 413,
    ReasonCode.MALFORMED: 422,
    ReasonCode.UNSUPPORTED_SCHEMA: 422,
    ReasonCode.MISROUTED: 422,
    ReasonCode.IDEMPOTENCY_KEY_REUSED: 422,
    ReasonCode.UNAUTHENTICATED: 422,  # a record on the topic, not an HTTP caller: the API always signs
    ReasonCode.RULE_VIOLATED: 422,
    ReasonCode.RULE_ERROR: 422,
    ReasonCode.RULES_VERSION_UNKNOWN: 422,  # the validator lacked the rules it was to decide under: refused, final
    ReasonCode.UNIQUE_VIOLATION: 409,  # another object holds the value (commands.unique)
    ReasonCode.OBJECT_HELD: 409,  # the object waits for a decision that spans objects: send it again
    "RESERVED_ID": 422,  # an object id in the namespace of Arbiter's own records (commands.ids.reserved)
    "RULES_INVALID": 422,
    "RULES_CONFLICT": 409,
    "RULES_NOT_DEPLOYED": 404,
    "UNAUTHORIZED": 401,
    "INSUFFICIENT_SCOPE": 403,
    "IDENTITY_PROVIDER_UNAVAILABLE": 503,
    "BAD_REQUEST": 400,
    "INVALID_JSON": 400,
    "INVALID_REQUEST": 422,
    "BODY_TOO_LARGE": 413,
    "PRECONDITION_FAILED": 412,
    "ROUTE_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "BROKER_UNAVAILABLE": 503,
    "WRITES_PAUSED": 503,
    "READ_MODEL_UNAVAILABLE": 503,
    "TOO_MANY_WAITERS": 503,
    "RATE_LIMITED": 429,
    "UNSERVABLE_DOCUMENT": 503,
    "VIEW_STALE": 503,
    "DOCUMENT_QUARANTINED": 503,
    "POSITION_NOT_REACHED": 503,
    "INVALID_CURSOR": 400,
    "VERSION_NOT_FOUND": 404,
    "TOO_MANY_SUBSCRIBERS": 503,
    "TOO_MANY_SUBSCRIPTIONS": 429,
    "TOO_MANY_IDEMPOTENCY_KEYS": 429,
    "CHANGES_EXPIRED": 410,
}

_TITLES: dict[str, str] = {
    ReasonCode.ALREADY_EXISTS: "The object (or editor) already exists",
    ReasonCode.VERSION_CONFLICT: "The object is at another version",
    ReasonCode.NOT_FOUND: "No such object (or editor)",
    ReasonCode.DELETED: "The object was deleted",
    ReasonCode.FORBIDDEN: "The principal may not do this",
    ReasonCode.DUPLICATE: "The command was already decided",
    ReasonCode.TOO_LARGE: "Too large",
    ReasonCode.MALFORMED: "The command is malformed",
    ReasonCode.IDEMPOTENCY_KEY_REUSED: "The Idempotency-Key was already used for a different request",
    ReasonCode.RULE_VIOLATED: "A rule of the team's rules refused the command",
    ReasonCode.RULE_ERROR: "A rule of the team's rules failed on the command, which is refused",
    ReasonCode.UNIQUE_VIOLATION: "A value its type declares unique is held by another object",
    ReasonCode.OBJECT_HELD: "The object waits for a decision that spans objects; send the command again",
    "RULES_INVALID": "The rules document does not compile",
    "RULES_CONFLICT": "A concurrent deploy took this rules version",
    "RULES_NOT_DEPLOYED": "No rules have been deployed",
    "UNAUTHORIZED": "A valid bearer token is required",
    "INSUFFICIENT_SCOPE": "The bearer token lacks the scope this needs",
    "IDENTITY_PROVIDER_UNAVAILABLE": "The identity provider's keys could not be fetched; retry later",
    "BROKER_UNAVAILABLE": "The command could not be stored; retry with the same Idempotency-Key",
    "WRITES_PAUSED": "The commands topic is being rescaled; nothing was produced, retry after Retry-After seconds",
    "READ_MODEL_UNAVAILABLE": "The read model is not open",
    "TOO_MANY_WAITERS": "Too many requests are waiting for decisions; nothing was produced, retry later",
    "RATE_LIMITED": "The principal is over its rate; retry after Retry-After seconds",
    "UNSERVABLE_DOCUMENT": "The stored document is not RFC 8259 JSON; the read model needs a rebuild",
    "VIEW_STALE": "Events of this object are missing from the read model; its view is not served",
    "DOCUMENT_QUARANTINED": "An event's document could not be applied; the document is not served",
    "POSITION_NOT_REACHED": "The read model has not yet projected the positions in Arbiter-Min-Position",
    "INVALID_CURSOR": "The cursor (a list's, or the change feed's Last-Event-ID) was not handed out by this API to "
                      "this caller",
    "VERSION_NOT_FOUND": "The object has not reached this version",
    "TOO_MANY_SUBSCRIBERS": "This API process serves its most change streams; retry later",
    "TOO_MANY_SUBSCRIPTIONS": "The principal holds its most change streams on this API process",
    "TOO_MANY_IDEMPOTENCY_KEYS": "The principal holds its most Idempotency-Keys; nothing was produced, retry after "
                                 "Retry-After seconds",
    "CHANGES_EXPIRED": "Events after Last-Event-ID are no longer kept (retention); start again without it",
}


class ApiError(ArbiterError):
    """An error answered over HTTP: its ``code`` picks the status; ``headers`` and ``extra`` go into the answer."""

    def __init__(self, message: str, *, code: str, headers: Mapping[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(message, code=code)
        self.headers = dict(headers or {})
        self.extra = extra


class Rejected(ArbiterError):
    """The validator rejected the command the client waited on (``rejection`` is its summary)."""

    def __init__(self, rejection: OutcomeSummary, *, expected_version: int | None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(rejection.message or "", code=rejection.reason or "REJECTED")
        self.rejection = rejection
        self.expected_version = expected_version
        self.headers = dict(headers or {})  # e.g. Server-Timing (app.api.writes.submit)


def rule_fields(rejection: OutcomeSummary) -> dict[str, Any]:
    """Return the rule members of a rejection's problem: the rules version, and for a rule's refusal the rule's name,
    message and JSON pointers (so a client shows the message without parsing ``detail``)."""
    fields: dict[str, Any] = {}
    if rejection.rules_version is not None:
        fields["rules_version"] = rejection.rules_version
    if rejection.rule is not None:  # also with no rules deployed: a typed create is refused by rule `types`
        fields.update(rule=rejection.rule, rule_message=rejection.rule_message,
                      rule_pointers=list(rejection.rule_pointers))
    return fields


def status_of(code: str, *, expected_version: int | None = None) -> int:
    """Return the HTTP status of ``code``; a version conflict after If-Match is 412 Precondition Failed."""
    if code == ReasonCode.VERSION_CONFLICT and expected_version is not None:
        return 412
    return STATUS.get(code, 400)


def problem(status: int, code: str, detail: str, *, instance: str | None = None,
            headers: Mapping[str, str] | None = None, **extra: Any) -> JSONResponse:
    """Return an ``application/problem+json`` answer naming ``code``."""
    body: dict[str, Any] = {
        "type": f"urn:arbiter:problem:{code.lower().replace('_', '-')}",
        "title": _TITLES.get(code, code.replace("_", " ").capitalize()),
        "status": status,
        "detail": detail,
        "code": code,
    }
    if instance:
        body["instance"] = instance
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, headers=dict(headers or {}), media_type=PROBLEM_JSON)


def arbiter_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ArbiterError)
    if isinstance(exc, Rejected):
        rej = exc.rejection
        headers = {"ETag": f'"{rej.version}"'} if rej.version is not None else {}
        if rej.rules_version is not None:
            headers["Arbiter-Rules-Version"] = str(rej.rules_version)  # app.api.rules.RULES_VERSION_HEADER
        headers.update(exc.headers)
        return problem(status_of(exc.code, expected_version=exc.expected_version), exc.code, exc.message,
                       instance=f"/commands/{rej.command_id}", headers=headers, command_id=rej.command_id,
                       object_id=rej.object_id, current_version=rej.version,
                       expected_version=exc.expected_version, **rule_fields(rej))
    headers, extra = (exc.headers, exc.extra) if isinstance(exc, ApiError) else ({}, {})
    problems = getattr(exc, "problems", None)  # RULES_INVALID (commands.rules.RulesInvalid): each with a pointer
    if problems:
        extra = {**extra, "problems": list(problems)}
    status = status_of(exc.code)
    if status == 503 and "Retry-After" not in headers:
        # Every 503 says when to try again (e.g. WRITES_PAUSED raised by app.rescale below a route, as PUT /rules
        # meets it): clients retry after it instead of at once (RFC 9110 §10.2.3).
        settings = getattr(request.app.state, "settings", None)
        headers = {**headers, "Retry-After": str(getattr(settings, "retry_after_s", 1))}
    if isinstance(exc, Unauthorized | InsufficientScope):  # RFC 6750 §3: the error code in WWW-Authenticate
        headers = {"WWW-Authenticate": exc.www_authenticate}
        if isinstance(exc, InsufficientScope):
            extra = {"scope": exc.scope}
    return problem(status, exc.code, exc.message, instance=request.url.path, headers=headers, **extra)


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
              for e in exc.errors()[:50]]
    if any(e["type"] == "json_invalid" for e in errors):
        return problem(400, "INVALID_JSON", "the request body is not valid JSON", instance=request.url.path,
                       errors=errors)
    return problem(422, "INVALID_REQUEST", "the request does not match the API's schema", instance=request.url.path,
                   errors=errors)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "ROUTE_NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 415: "UNSUPPORTED_MEDIA_TYPE"}.get(
        exc.status_code, "BAD_REQUEST")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Starlette names the first matching route's methods; Allow must list them all
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return problem(exc.status_code, code, str(exc.detail), instance=request.url.path, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def install(app: FastAPI) -> None:
    """Route every error to problem+json: Arbiter's coded errors, schema violations, unknown routes."""
    app.add_exception_handler(ArbiterError, arbiter_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"description": text, "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for status, text in [(400, "Bad request (e.g. invalid JSON, bad If-Match)"),
                         (401, "Missing or bad bearer token (WWW-Authenticate says why, RFC 6750)"),
                         (403, "INSUFFICIENT_SCOPE: the token lacks the scope this needs (or, after Prefer: "
                               "wait, FORBIDDEN)"),
                         (413, "Body larger than ARBITER_MAX_BODY_BYTES"),
                         (422, "Request does not match the schema, or its JSON is not RFC 8259 (NaN, Infinity, numbers "
                               "beyond a double, lone surrogates, nesting deeper than 32 levels)"),
                         (503, "Broker unreachable, produce timed out or too many waiters (nothing produced); "
                               "retry after Retry-After seconds")]
}

#: The answer of a request over its principal's write or read rate (``app.api.writes.quota``): writes and reads only.
RATE_LIMITED_RESPONSE: dict[int | str, dict[str, Any]] = {429: PROBLEM_RESPONSES[401] | {
    "description": "RATE_LIMITED: the principal is over its write or read rate (per API process); Retry-After, "
                   "RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11) say when to come back"}}
