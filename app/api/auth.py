"""Who is calling: the ``Caller`` of a bearer token, the scopes each action needs, and the 401/403 errors (RFC 6750).

``await authenticate_bearer(authorization, verifier)`` is the API's one entry point: it takes the raw
``Authorization`` header value and the ``TokenVerifier`` kept on ``app.state.verifier`` and returns a ``Caller`` or
raises ``Unauthorized`` (a key the verifier must fetch is awaited off the event loop). It needs no Starlette
request, so a plain-ASGI route can call it as well as ``app.api.deps.authenticate``; ``authenticate_header`` is the
same for a caller without an event loop.
Principals are 1-128 characters of ``[A-Za-z0-9._@:+-]`` (not ``.`` or ``..``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from commands import Command, CreateObject, DeleteObject, UpdateObject
from commands.errors import ArbiterError

PRINCIPAL_PATTERN = r"^[A-Za-z0-9_@:+\-][A-Za-z0-9._@:+\-]{0,127}$"  # not "." or "..": URLs would lose them
_PRINCIPAL = re.compile(PRINCIPAL_PATTERN)

#: The scopes a token may carry (``scope``, space-separated, or ``scp``) and what each lets its holder do.
WRITE, SHARE, READ, OPERATE, METRICS = "arbiter:write", "arbiter:share", "arbiter:read", "arbiter:operate", \
    "arbiter:metrics"
SCOPES = frozenset({WRITE, SHARE, READ, OPERATE, METRICS})
#: What `arbiter token` grants a user by default: everything but operating.
USER_SCOPES = (READ, WRITE, SHARE)


def is_principal(text: object) -> bool:
    """Return True if ``text`` is a string that follows the principal character rules."""
    return isinstance(text, str) and _PRINCIPAL.match(text) is not None


class Unauthorized(ArbiterError):
    """A request without a valid bearer token: 401 with ``WWW-Authenticate: Bearer error="..."`` (RFC 6750 §3.1)."""

    code = "UNAUTHORIZED"

    def __init__(self, message: str, *, error: str | None = "invalid_token") -> None:
        super().__init__(message)
        self.error = error  # None: no credentials at all, so no error code (RFC 6750 §3.1)

    @property
    def www_authenticate(self) -> str:
        if self.error is None:
            return 'Bearer realm="arbiter"'
        detail = self.message.replace("\\", "").replace('"', "'")
        return f'Bearer realm="arbiter", error="{self.error}", error_description="{detail}"'


class InsufficientScope(ArbiterError):
    """A valid token without the scope an action needs: 403 ``insufficient_scope`` (RFC 6750 §3.1)."""

    code = "INSUFFICIENT_SCOPE"

    def __init__(self, scope: str) -> None:
        super().__init__(f"the bearer token lacks the scope {scope!r}")
        self.scope = scope

    @property
    def www_authenticate(self) -> str:
        return f'Bearer realm="arbiter", error="insufficient_scope", scope="{self.scope}"'


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as its verified token says: never built from anything the client sent unsigned."""

    principal: str
    scopes: frozenset[str]
    groups: tuple[str, ...]
    issuer: str
    jti: str | None
    expires_at: float

    def require(self, scope: str) -> None:
        """Raise ``InsufficientScope`` unless the token carries ``scope``."""
        if scope not in self.scopes:
            raise InsufficientScope(scope)


def scope_for(command: Command) -> str:
    """Return the scope a command needs: ``arbiter:write`` to create, update or delete, ``arbiter:share`` to grant."""
    return WRITE if isinstance(command, CreateObject | UpdateObject | DeleteObject) else SHARE


class TokenVerifierLike(Protocol):
    """What ``authenticate_bearer`` and ``authenticate_header`` need of ``app.api.tokens.TokenVerifier``."""

    def verify(self, token: str) -> Caller: ...
    async def averify(self, token: str) -> Caller: ...


def _bearer(authorization: str | None) -> str:
    """Return the token of an ``Authorization: Bearer <token>`` header value; raise ``Unauthorized``."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("an Authorization: Bearer <token> header is required",
                           error=None if not authorization else "invalid_request")
    return token


async def authenticate_bearer(authorization: str | None, verifier: TokenVerifierLike) -> Caller:
    """Return the ``Caller`` of an ``Authorization: Bearer <token>`` header value; raise ``Unauthorized``."""
    return await verifier.averify(_bearer(authorization))


def authenticate_header(authorization: str | None, verifier: TokenVerifierLike) -> Caller:
    """``authenticate_bearer`` for a caller without an event loop (it may wait for a key fetch)."""
    return verifier.verify(_bearer(authorization))
