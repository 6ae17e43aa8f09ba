"""Which ``ARBITER_AUTH_SECRET`` the API may start with: a real one, or a weak one only on a development loopback.

Whoever knows the secret can derive the key that signs command records (``app/signing.py``) and so put
commands on the topic as any principal, so the placeholder (it is in this repository) or a short secret is
refused unless ``ARBITER_ENVIRONMENT=development`` and the API binds only to loopback (127.0.0.0/8, ::1,
``localhost``), where nobody else can reach it.
"""

from __future__ import annotations

import ipaddress

from app.errors import SetupError
from app.settings import PLACEHOLDER_SECRET, Settings

#: The shortest secret accepted outside a development loopback: the size of HMAC-SHA256's output.
MIN_SECRET_BYTES = 32


def is_loopback(host: str) -> bool:
    """Return True if binding to ``host`` serves this machine only."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def secret_problem(settings: Settings, host: str) -> str | None:
    """Return why the API must not start with ``settings.auth_secret`` bound to ``host``, or None if it may."""
    secret = settings.auth_secret.get_secret_value()
    if secret == PLACEHOLDER_SECRET:
        weakness = "is the development placeholder, which is published in this repository"
    elif len(secret.encode("utf-8")) < MIN_SECRET_BYTES:
        weakness = f"has {len(secret.encode('utf-8'))} bytes, fewer than {MIN_SECRET_BYTES}"
    else:
        return None
    if settings.environment == "development" and is_loopback(host):
        return None
    where = f"ARBITER_ENVIRONMENT={settings.environment}" if settings.environment != "development" \
        else f"a bind address other than loopback ({host!r})"
    return (f"ARBITER_AUTH_SECRET {weakness}; that is allowed only in development on loopback (127.0.0.0/8, ::1, "
            f"localhost), not with {where}. Set a random secret of at least {MIN_SECRET_BYTES} bytes, e.g. "
            "`python -c 'import secrets; print(secrets.token_urlsafe(48))'`")


def require_usable_secret(settings: Settings, host: str) -> None:
    """Raise ``SetupError`` (code WEAK_SECRET) if the API must not start; see ``secret_problem``."""
    problem = secret_problem(settings, host)
    if problem is not None:
        raise SetupError(problem, code="WEAK_SECRET")
