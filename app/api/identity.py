"""Which issuers the API trusts, from ``Settings``: the ``TokenVerifier`` and Arbiter's own ``LocalIssuer``."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from app.api.local_issuer import LocalIssuer
from app.api.tokens import ClaimRules, TokenVerifier, TrustedIssuer, file_issuer, http_issuer
from app.settings import Settings

#: The namespace of the principals of Arbiter's own issuer when another issuer is trusted too.
LOCAL_NAME = "arbiter"


def identity_dir(settings: Settings) -> Path:
    """Where the development issuer's key pairs live."""
    return settings.path(settings.var_dir) / "identity"


def local_issuer(settings: Settings) -> LocalIssuer:
    """Return Arbiter's development issuer, creating its first key pair if there is none (idempotent)."""
    return LocalIssuer.open(identity_dir(settings), settings.local_issuer_id, settings.oidc_audience[0],
                            settings.oidc_groups_claim)


def _named(entry: str) -> tuple[str, str]:
    """Return (name, issuer URL) of an ``ARBITER_OIDC_ISSUER`` entry: ``name=url``, or a bare URL named by its host."""
    name, eq, url = entry.partition("=")
    if eq and "://" not in name:
        return name, url
    return (urlparse(entry).hostname or entry), entry


def build_verifier(settings: Settings) -> TokenVerifier:
    """Return the verifier of every issuer ``settings`` trusts; raise ``ValueError`` on a setting it cannot use."""
    options = {"cache_s": settings.oidc_jwks_cache_s, "refresh_min_s": settings.oidc_jwks_refresh_min_s}
    issuers: list[TrustedIssuer] = [http_issuer(url, name, timeout_s=settings.oidc_http_timeout_s, **options)
                                    for name, url in map(_named, settings.oidc_issuer)]
    if settings.trusts_local_issuer:
        issuers.append(file_issuer(settings.local_issuer_id, LOCAL_NAME, local_issuer(settings).jwks, **options))
    names = [i.name for i in issuers]
    if len(set(names)) != len(names):
        raise ValueError(f"two trusted issuers share a name ({names}); name them: ARBITER_OIDC_ISSUER='a=https://...'")
    return TokenVerifier(issuers, audiences=settings.oidc_audience, algorithms=settings.oidc_algorithms,
                         rules=ClaimRules(settings.oidc_principal_claim, settings.oidc_groups_claim,
                                          settings.oidc_max_groups, settings.oidc_leeway_s),
                         cache_size=settings.token_cache_size)


def dev_token(settings: Settings, principal: str, scopes: tuple[str, ...] | None = None, ttl_s: int | None = None,
              groups: tuple[str, ...] = ()) -> str:
    """Return a development token of Arbiter's own issuer (the CLI, the scenario, the benchmarks and tests)."""
    from app.api.auth import USER_SCOPES

    return local_issuer(settings).issue(principal, ttl_s or settings.token_ttl_s,
                                        scopes=USER_SCOPES if scopes is None else scopes, groups=groups)
