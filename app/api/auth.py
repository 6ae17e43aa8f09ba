"""Bearer tokens: HMAC-SHA256-signed ``<payload>.<signature>``, the principal in the payload, nothing else trusted.

A token is ``base64url(json {"sub": principal, "iat": s, "exp": s}) + "." + base64url(hmac_sha256(secret, payload))``.
It is stateless: any API process with the same ``ARBITER_AUTH_SECRET`` verifies it; rotating the secret
revokes every token. Principals are 1-128 characters of ``[A-Za-z0-9._@:+-]``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time

from commands.errors import ArbiterError

PRINCIPAL_PATTERN = r"^[A-Za-z0-9_@:+\-][A-Za-z0-9._@:+\-]{0,127}$"  # not "." or "..": URLs would lose them
_PRINCIPAL = re.compile(PRINCIPAL_PATTERN)


class Unauthorized(ArbiterError):
    """A request without a valid bearer token."""

    code = "UNAUTHORIZED"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode("utf-8"), payload.encode("utf-8"), hashlib.sha256).digest())


def issue_token(secret: str, principal: str, ttl_s: int, *, now: float | None = None) -> str:
    """Return a token for ``principal`` valid for ``ttl_s`` seconds."""
    if not _PRINCIPAL.match(principal):
        raise ArbiterError(f"principal {principal!r} does not match {PRINCIPAL_PATTERN}", code="MALFORMED")
    iat = int(time.time() if now is None else now)
    payload = _b64(json.dumps({"sub": principal, "iat": iat, "exp": iat + ttl_s}, separators=(",", ":")).encode())
    return f"{payload}.{_sign(secret, payload)}"


def verify_token(secret: str, token: str, *, now: float | None = None) -> str:
    """Return the token's principal; raise ``Unauthorized`` if it is forged, malformed or expired."""
    payload, dot, signature = token.partition(".")
    # Compare bytes: compare_digest refuses non-ASCII str, and a forged header may carry any latin-1.
    if not dot or not hmac.compare_digest(_sign(secret, payload).encode(), signature.encode("utf-8", "replace")):
        raise Unauthorized("bearer token signature is invalid")
    try:
        claims = json.loads(_unb64(payload))
        principal, exp = claims["sub"], claims["exp"]
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise Unauthorized("bearer token payload is malformed") from e
    if not isinstance(principal, str) or not _PRINCIPAL.match(principal) or not isinstance(exp, int):
        raise Unauthorized("bearer token payload is malformed")
    if exp <= (time.time() if now is None else now):
        raise Unauthorized("bearer token has expired")
    return principal
