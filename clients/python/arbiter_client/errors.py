"""Typed exceptions by the problem ``code`` of Arbiter's answers (RFC 9457 problem+json), and which are retryable.

``CODES`` names every code the server answers with and the class it becomes; ``tests/unit/test_client_codes.py``
holds it equal to the server's own table (``app.api.problems.STATUS``), so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ArbiterError(Exception):
    """Root of the client's errors: an answer that was a problem, or a request that could not be answered."""

    code: str = "ARBITER_ERROR"
    #: True if sending the same request again (same Idempotency-Key) may succeed later.
    retryable: bool = False

    def __init__(self, detail: str, *, status: int | None = None, code: str | None = None,
                 problem: Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        if code is not None:
            self.code = code
        self.problem: dict[str, Any] = dict(problem or {})
        self.headers: dict[str, str] = dict(headers or {})

    @property
    def retry_after(self) -> str | None:
        """The answer's ``Retry-After`` header, as sent."""
        return self.headers.get("retry-after")

    @property
    def current_version(self) -> int | None:
        """The object's version when a command was rejected (the problem's ``current_version``, else its ETag)."""
        v = self.problem.get("current_version")
        if isinstance(v, int):
            return v
        etag = self.headers.get("etag", "")
        return int(etag.strip('"')) if etag.strip('"').isdigit() else None

    def __str__(self) -> str:
        return f"{self.code} ({self.status}): {self.detail}" if self.status else f"{self.code}: {self.detail}"


class TransportFailed(ArbiterError):
    """The request got no answer (connection refused or reset, timeout) after every retry the policy allows."""

    code = "TRANSPORT_FAILED"
    retryable = True


# --- the validator's decisions and the API's refusals of a request ------------------------------------------
class Rejected(ArbiterError):
    """The command was decided and rejected by the validator (or refused for the same reason by the API)."""


class AlreadyExists(Rejected):
    code = "ALREADY_EXISTS"


class VersionConflict(Rejected):
    """The object is at another version (409, or 412 after If-Match); ``current_version`` says which."""

    code = "VERSION_CONFLICT"


class NotFound(Rejected):
    """No such object (or not one the caller may read: the same answer), or no outcome known for a command."""

    code = "NOT_FOUND"


class Deleted(Rejected):
    code = "DELETED"


class Forbidden(Rejected):
    code = "FORBIDDEN"


class Duplicate(Rejected):
    code = "DUPLICATE"


class TooLarge(Rejected):
    code = "TOO_LARGE"


class IdempotencyKeyReused(Rejected):
    """The Idempotency-Key was already used for a different request."""

    code = "IDEMPOTENCY_KEY_REUSED"


class RuleViolated(Rejected):
    """A team rule refused the command: ``rule`` names it (``<type>:<name>``), ``message`` is the rule's own message,
    ``pointers`` the JSON pointers it objects to and ``rules_version`` the rules version that decided.

    Read from the problem's ``rule``, ``rule_message`` (else ``detail``), ``rule_pointers`` and ``rules_version``.
    """

    code = "RULE_VIOLATED"

    @property
    def rule(self) -> str | None:
        r = self.problem.get("rule")
        return r if isinstance(r, str) else None

    @property
    def message(self) -> str:
        m = self.problem.get("rule_message")
        return m if isinstance(m, str) else self.detail

    @property
    def pointers(self) -> list[str]:
        p = self.problem.get("rule_pointers")
        return [str(x) for x in p] if isinstance(p, list) else []

    @property
    def rules_version(self) -> int | None:
        v = self.problem.get("rules_version")
        return v if isinstance(v, int) else None


class RuleError(RuleViolated):
    """A team rule failed at run time on the command (a missing field, a type error): refused, naming the rule."""

    code = "RULE_ERROR"


class RulesConflict(ArbiterError):
    """409: a concurrent deploy took the rules version this deploy wanted; read GET /rules and deploy again."""

    code = "RULES_CONFLICT"


# --- the request itself ----------------------------------------------------------------------------------
class BadRequest(ArbiterError):
    """The request is malformed (400/422/413/415/404 route/405): sending it again cannot help."""


class Unauthorized(ArbiterError):
    code = "UNAUTHORIZED"


class InsufficientScope(ArbiterError):
    code = "INSUFFICIENT_SCOPE"


class PreconditionFailed(BadRequest):
    code = "PRECONDITION_FAILED"


class VersionNotFound(NotFound):
    code = "VERSION_NOT_FOUND"


class ChangesExpired(ArbiterError):
    """The change feed no longer keeps the events after the last id: start again without it."""

    code = "CHANGES_EXPIRED"


# --- try again later ---------------------------------------------------------------------------------------
class Unavailable(ArbiterError):
    """503: nothing (or not all) was done; the same request may succeed after ``Retry-After``."""

    retryable = True


class BrokerUnavailable(Unavailable):
    code = "BROKER_UNAVAILABLE"


class PositionNotReached(Unavailable):
    code = "POSITION_NOT_REACHED"


class RateLimited(ArbiterError):
    """429: the principal is over its rate (or holds its most change streams); retry after ``Retry-After``."""

    code = "RATE_LIMITED"
    retryable = True


class TooManySubscriptions(RateLimited):
    code = "TOO_MANY_SUBSCRIPTIONS"


class TooManyIdempotencyKeys(RateLimited):
    """429: the principal holds its most Idempotency-Keys (until its oldest expires, ``Retry-After``); nothing was
    stored. Retrying sooner with a new key is refused the same way; a write without a key is not."""

    code = "TOO_MANY_IDEMPOTENCY_KEYS"


#: Every code the server answers with, and the class it becomes. Codes without a class of their own take the
#: class of their kind. Held equal to ``app.api.problems.STATUS`` by a test.
CODES: dict[str, type[ArbiterError]] = {
    "ALREADY_EXISTS": AlreadyExists, "VERSION_CONFLICT": VersionConflict, "NOT_FOUND": NotFound,
    "DELETED": Deleted, "FORBIDDEN": Forbidden, "DUPLICATE": Duplicate, "TOO_LARGE": TooLarge,
    "MALFORMED": Rejected, "UNSUPPORTED_SCHEMA": Rejected, "MISROUTED": Rejected,
    "IDEMPOTENCY_KEY_REUSED": IdempotencyKeyReused, "UNAUTHENTICATED": Rejected,
    "UNAUTHORIZED": Unauthorized, "INSUFFICIENT_SCOPE": InsufficientScope,
    "IDENTITY_PROVIDER_UNAVAILABLE": Unavailable, "BAD_REQUEST": BadRequest, "INVALID_JSON": BadRequest,
    "INVALID_REQUEST": BadRequest, "BODY_TOO_LARGE": BadRequest, "PRECONDITION_FAILED": PreconditionFailed,
    "ROUTE_NOT_FOUND": BadRequest, "METHOD_NOT_ALLOWED": BadRequest, "UNSUPPORTED_MEDIA_TYPE": BadRequest,
    "BROKER_UNAVAILABLE": BrokerUnavailable, "READ_MODEL_UNAVAILABLE": Unavailable,
    "TOO_MANY_WAITERS": Unavailable, "RATE_LIMITED": RateLimited, "UNSERVABLE_DOCUMENT": Unavailable,
    "VIEW_STALE": Unavailable, "DOCUMENT_QUARANTINED": Unavailable, "POSITION_NOT_REACHED": PositionNotReached,
    "INVALID_CURSOR": BadRequest, "VERSION_NOT_FOUND": VersionNotFound, "TOO_MANY_SUBSCRIBERS": Unavailable,
    "WRITES_PAUSED": Unavailable, "TOO_MANY_SUBSCRIPTIONS": TooManySubscriptions, "CHANGES_EXPIRED": ChangesExpired,
    "TOO_MANY_IDEMPOTENCY_KEYS": TooManyIdempotencyKeys,
}
CODES.update({"RULE_VIOLATED": RuleViolated, "RULE_ERROR": RuleError, "RULES_VERSION_UNKNOWN": Rejected,
              "RULES_INVALID": BadRequest, "RULES_CONFLICT": RulesConflict, "RULES_NOT_DEPLOYED": NotFound,
              "RESERVED_ID": BadRequest, "UNIQUE_VIOLATION": Rejected, "OBJECT_HELD": Rejected})
#: Codes the client knows ahead of the server (none now).
PENDING_CODES: frozenset[str] = frozenset()


def _by_status(status: int) -> type[ArbiterError]:
    if status == 503:
        return Unavailable
    if status == 429:
        return RateLimited
    if status == 401:
        return Unauthorized
    return BadRequest if 400 <= status < 500 else ArbiterError


def error_from(status: int, headers: Mapping[str, str], body: Any) -> ArbiterError:  # noqa: ANN401 - parsed JSON
    """Return the typed error of an answer with ``status``: by its problem ``code``, else by its status."""
    problem = body if isinstance(body, dict) else {}
    code = problem.get("code") if isinstance(problem.get("code"), str) else None
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    cls = CODES.get(code, _by_status(status)) if code else _by_status(status)
    if "rule" in problem and not issubclass(cls, RuleViolated):  # a rejection naming its rule, whatever its code
        cls = RuleViolated
    return cls(detail, status=status, code=code or f"HTTP_{status}", problem=problem,
               headers={k.lower(): v for k, v in headers.items()})
