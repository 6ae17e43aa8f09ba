"""Which issuers the API trusts, from ``Settings``: the ``TokenVerifier`` and Arbiter's own ``LocalIssuer``."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.api.local_issuer import LocalIssuer
from app.api.tokens import ClaimRules, TokenVerifier, TrustedIssuer, file_issuer, http_issuer
from app.settings import ISSUER_NAME_PATTERN, MAX_TOKEN_TTL_S, Settings

#: Worker threads that fetch the issuers' keys (each issuer fetches one at a time): never the event loop.
KEY_FETCH_THREADS = 4


def identity_dir(settings: Settings) -> Path:
    """Where the development issuer's key pairs live."""
    return settings.path(settings.var_dir) / "identity"


def local_issuer(settings: Settings) -> LocalIssuer:
    """Return Arbiter's development issuer, creating its first key pair if there is none (idempotent)."""
    return LocalIssuer.open(identity_dir(settings), settings.local_issuer_id, settings.oidc_audience[0],
                            settings.oidc_groups_claim)


def _named(entry: str) -> tuple[str | None, str]:
    """Return (name, issuer URL) of an ``ARBITER_OIDC_ISSUER`` entry: ``name=url``, or a bare URL (name None)."""
    name, eq, url = entry.partition("=")
    if eq and "://" not in name:
        if not re.fullmatch(ISSUER_NAME_PATTERN, name) or not name:
            raise ValueError(f"issuer name {name!r} is not 1-32 characters of [A-Za-z0-9._@+-] (no ':')")
        return name, url
    return None, entry


def build_verifier(settings: Settings) -> TokenVerifier:
    """Return the verifier of every issuer ``settings`` trusts; raise ``ValueError`` on a setting it cannot use.

    A named issuer (``name=url``, ``ARBITER_LOCAL_ISSUER_NAME``) namespaces its principals and groups whatever
    else is trusted; at most one may be bare. Groups are believed only from ``ARBITER_OIDC_GROUPS_ISSUERS``.
    """
    fetchers = ThreadPoolExecutor(KEY_FETCH_THREADS, thread_name_prefix="jwks")
    options = {"cache_s": settings.oidc_jwks_cache_s, "refresh_min_s": settings.oidc_jwks_refresh_min_s,
               "retry_s": settings.oidc_jwks_retry_s}
    believed = set(settings.oidc_groups_issuers)

    def groups_of(name: str | None, url: str) -> bool:
        return "*" in believed or url in believed or (name is not None and name in believed)

    issuers: list[TrustedIssuer] = [
        http_issuer(url, name, fetchers, timeout_s=settings.oidc_http_timeout_s, trust_groups=groups_of(name, url),
                    **options) for name, url in map(_named, settings.oidc_issuer)]
    if settings.trusts_local_issuer:
        name = settings.local_issuer_name or None
        issuers.append(file_issuer(settings.local_issuer_id, name, local_issuer(settings).jwks, fetchers,
                                   trust_groups=groups_of(name, settings.local_issuer_id), **options))
    unknown = believed - {"*"} - {i.issuer for i in issuers} - {i.name for i in issuers if i.name is not None}
    if unknown:  # a typo would silently take every group of the issuer meant
        raise ValueError(f"ARBITER_OIDC_GROUPS_ISSUERS names {sorted(unknown)}, which is no trusted issuer's name "
                         "or iss")
    return TokenVerifier(issuers, audiences=settings.oidc_audience, algorithms=settings.oidc_algorithms,
                         rules=ClaimRules(settings.oidc_principal_claim, settings.oidc_groups_claim,
                                          settings.oidc_max_groups, settings.oidc_leeway_s),
                         cache_size=settings.token_cache_size)


def dev_token(settings: Settings, principal: str, scopes: tuple[str, ...] | None = None, ttl_s: int | None = None,
              groups: tuple[str, ...] = ()) -> str:
    """Return a development token of Arbiter's own issuer (the CLI, the scenario, the benchmarks and tests)."""
    from app.api.auth import USER_SCOPES

    if ttl_s is not None and ttl_s > MAX_TOKEN_TTL_S:
        raise ValueError(f"a development token lives at most MAX_TOKEN_TTL_S, {MAX_TOKEN_TTL_S} s; not {ttl_s}")
    return local_issuer(settings).issue(principal, ttl_s or settings.token_ttl_s,
                                        scopes=USER_SCOPES if scopes is None else scopes, groups=groups)
