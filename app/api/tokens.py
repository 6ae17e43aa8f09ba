"""Verifying bearer JWTs of trusted OIDC issuers with PyJWT: keys from each issuer's JWKS, claims to a ``Caller``.

Every issuer, the providers of ``ARBITER_OIDC_ISSUER`` and Arbiter's own development issuer alike, goes through
``TokenVerifier.verify``; they differ only in where their JWKS comes from (discovery over HTTP, or the local key
files, ``app.api.local_issuer``). ``iss``, ``aud``, ``exp``, ``nbf`` and ``iat`` are checked with
``ARBITER_OIDC_LEEWAY_S`` of skew; only the algorithms of ``ARBITER_OIDC_ALGORITHMS`` are accepted (asymmetric
only: never ``none``, never ``HS*`` with keys from a JWKS). A JWKS is cached for ``ARBITER_OIDC_JWKS_CACHE_S`` and
fetched again on an unknown ``kid`` at most once per ``ARBITER_OIDC_JWKS_REFRESH_MIN_S`` (PyJWT's cooldown), so a
provider can rotate its keys without a restart and a flood of made-up kids cannot flood it.
Verified tokens are kept (bounded LRU) until they expire: a client's next request costs a dict lookup.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import jwt

from app.api.auth import SCOPES, Caller, Unauthorized, is_principal
from app.api.problems import ApiError
from app.limits import GROUP_NAME_BYTES, ISSUER_BYTES, JTI_BYTES
from commands.access import GROUP_PREFIX

log = logging.getLogger(__name__)

#: The only algorithms ``ARBITER_OIDC_ALGORITHMS`` may name: asymmetric signatures, whose keys a JWKS publishes.
ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
DISCOVERY_PATH = "/.well-known/openid-configuration"


class ProviderUnavailable(ApiError):
    """The identity provider's discovery document or JWKS could not be fetched: 503, the token is not judged."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, code="IDENTITY_PROVIDER_UNAVAILABLE", headers={"Retry-After": str(retry_after_s)})


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """How a verified token's claims become a ``Caller``."""

    principal_claim: str = "sub"
    groups_claim: str = "groups"
    max_groups: int = 32
    leeway_s: int = 60


class _FileJWKS(jwt.PyJWKClient):
    """A ``PyJWKClient`` whose JWK Set comes from a callable (the local issuer's key files), not from HTTP."""

    def __init__(self, load: Callable[[], dict[str, Any]], *, lifespan: float, cooldown: float) -> None:
        super().__init__("http://local-issuer.invalid/jwks", cache_jwk_set=True, lifespan=lifespan,
                         cooldown_duration=cooldown)
        self._load = load

    def fetch_data(self) -> Any:  # noqa: ANN401 - PyJWKClient's own signature
        return self._load()


class TrustedIssuer:
    """One issuer Arbiter trusts: its ``iss``, the name its principals are namespaced with, and its JWKS."""

    def __init__(self, issuer: str, name: str, *, jwks: jwt.PyJWKClient | None = None, cache_s: float = 300,
                 refresh_min_s: float = 30, timeout_s: float = 5) -> None:
        self.issuer, self.name = issuer, name
        self._jwks = jwks
        self._cache_s, self._refresh_min_s, self._timeout_s = cache_s, refresh_min_s, timeout_s
        self._lock = threading.Lock()
        self._failed_at = -1e18

    def _discover(self) -> jwt.PyJWKClient:
        """Return the JWKS client, discovering ``jwks_uri`` from the issuer's openid-configuration the first time."""
        with self._lock:
            if self._jwks is not None:
                return self._jwks
            if time.monotonic() - self._failed_at < self._refresh_min_s:
                raise ProviderUnavailable(f"discovery of {self.issuer} failed recently", int(self._refresh_min_s))
            url = self.issuer.rstrip("/") + DISCOVERY_PATH
            try:
                with urllib.request.urlopen(url, timeout=self._timeout_s) as r:  # noqa: S310 - http(s) checked
                    doc = json.load(r)
                jwks_uri = doc["jwks_uri"]
                if doc.get("issuer") != self.issuer:
                    raise ValueError(f"its issuer is {doc.get('issuer')!r}, not {self.issuer!r}")
                self._jwks = jwt.PyJWKClient(jwks_uri, cache_jwk_set=True, lifespan=self._cache_s,
                                             cooldown_duration=self._refresh_min_s, timeout=self._timeout_s)
            except (OSError, ValueError, KeyError, TypeError, jwt.PyJWKClientError) as e:
                self._failed_at = time.monotonic()
                log.warning("OIDC discovery of %s failed: %s", url, e)
                raise ProviderUnavailable(f"cannot discover the keys of {self.issuer}: {e}",
                                          int(self._refresh_min_s)) from e
            return self._jwks

    def warm(self) -> None:
        """Discover and fetch the JWKS now (at start, off the event loop), so a first request does not wait on it."""
        try:
            self._discover().get_jwk_set()
        except (ProviderUnavailable, jwt.PyJWKClientError, jwt.PyJWKSetError) as e:
            log.warning("could not fetch the keys of %s yet (the first token will try again): %s", self.issuer, e)

    def key(self, kid: str | None) -> jwt.PyJWK:
        """Return the signing key ``kid`` of this issuer's JWKS (refetched on an unknown kid, rate-limited)."""
        if not kid:
            raise Unauthorized("the token's header names no key (kid)")
        client = self._discover()
        try:
            return client.get_signing_key(kid)
        except jwt.PyJWKClientConnectionError as e:
            raise ProviderUnavailable(f"cannot fetch the keys of {self.issuer}: {e}", int(self._refresh_min_s)) from e
        except (jwt.PyJWKClientError, jwt.PyJWKSetError) as e:
            raise Unauthorized(f"no key {kid!r} in the JWKS of {self.issuer}") from e


def http_issuer(issuer: str, name: str, **options: float) -> TrustedIssuer:
    """Return a trusted issuer whose keys are found by OIDC discovery (``https``, or ``http`` for a local test)."""
    if urlparse(issuer).scheme not in ("http", "https"):
        raise ValueError(f"issuer {issuer!r} is not an http(s) URL")
    return TrustedIssuer(issuer, name, **options)


def file_issuer(issuer: str, name: str, load: Callable[[], dict[str, Any]], *, cache_s: float = 300,
                refresh_min_s: float = 30) -> TrustedIssuer:
    """Return a trusted issuer whose JWKS is ``load()`` (Arbiter's development issuer), checked the same way."""
    return TrustedIssuer(issuer, name, jwks=_FileJWKS(load, lifespan=cache_s, cooldown=refresh_min_s))


class TokenVerifier:
    """Verify bearer JWTs of the trusted issuers and return their ``Caller``; one per API process."""

    def __init__(self, issuers: list[TrustedIssuer], *, audiences: list[str], algorithms: list[str],
                 rules: ClaimRules = ClaimRules(), cache_size: int = 10_000) -> None:  # noqa: B008 - frozen
        refused = set(algorithms) - ASYMMETRIC
        if refused or not algorithms:
            raise ValueError(f"algorithms {sorted(refused) or '[]'} are not allowed; use some of {sorted(ASYMMETRIC)}")
        if any(len(i.issuer.encode()) > ISSUER_BYTES for i in issuers):
            raise ValueError(f"an issuer is longer than {ISSUER_BYTES} bytes")
        if not issuers or not audiences:
            raise ValueError("at least one trusted issuer and one audience are required")
        self._issuers = {i.issuer: i for i in issuers}
        self._namespaced = len(issuers) > 1
        self._audiences, self._algorithms, self._rules = list(audiences), list(algorithms), rules
        self._cache: OrderedDict[str, Caller] = OrderedDict()
        self._cache_size = cache_size

    def warm(self) -> None:
        """Fetch every trusted issuer's keys now; blocking (HTTP), so call it off the event loop."""
        for issuer in self._issuers.values():
            issuer.warm()

    def verify(self, token: str) -> Caller:
        """Return the ``Caller`` of ``token``; raise ``Unauthorized`` (or ``ProviderUnavailable``, 503)."""
        cached = self._cache.get(token)
        if cached is not None:
            if cached.expires_at > time.time():
                self._cache.move_to_end(token)
                return cached
            del self._cache[token]
        caller = self._verify(token)
        self._cache[token] = caller
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return caller

    def _verify(self, token: str) -> Caller:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as e:
            raise Unauthorized(f"the bearer token is not a JWT: {e}") from e
        alg = header.get("alg")
        if alg not in self._algorithms:  # before any key is looked up: "none" and HS* never get further
            raise Unauthorized(f"the token's algorithm {alg!r} is not one of {self._algorithms}")
        iss = unverified.get("iss")
        trusted = self._issuers.get(iss) if isinstance(iss, str) else None
        if trusted is None:
            raise Unauthorized(f"the token's issuer {iss!r} is not trusted")
        key = trusted.key(header.get("kid"))
        try:
            claims = jwt.decode(token, key, algorithms=self._algorithms, audience=self._audiences, issuer=trusted.issuer,
                                leeway=self._rules.leeway_s,
                                options={"require": ["exp", "iat", "iss", "aud"], "verify_iat": True})
        except jwt.PyJWTError as e:
            raise Unauthorized(f"the bearer token is invalid: {e}") from e
        return self._caller(claims, trusted)

    def _caller(self, claims: Mapping[str, Any], trusted: TrustedIssuer) -> Caller:
        rules = self._rules
        value = claims.get(rules.principal_claim)
        principal = f"{trusted.name}:{value}" if self._namespaced and isinstance(value, str) else value
        if not is_principal(principal) or (isinstance(value, str) and value.startswith(GROUP_PREFIX)):
            raise Unauthorized(f"the token's {rules.principal_claim!r} claim is not a principal "
                               "(1-128 characters of [A-Za-z0-9._@:+-], not starting with 'group:')")
        assert isinstance(principal, str)
        jti = claims.get("jti")
        if isinstance(jti, str) and len(jti.encode("utf-8", "surrogatepass")) > JTI_BYTES:
            jti = hashlib.sha256(jti.encode("utf-8", "surrogatepass")).hexdigest()
        return Caller(principal, _scopes(claims), _groups(claims.get(rules.groups_claim), rules.max_groups),
                      trusted.issuer, jti if isinstance(jti, str) else None, float(claims["exp"]))


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """Return Arbiter's scopes among the token's ``scope`` (RFC 8693, space-separated) or ``scp`` (list or string)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found & SCOPES)


def _groups(value: object, most: int) -> tuple[str, ...]:
    """Return the caller's groups that can be grantees (``group:<name>`` is a principal), sorted, at most ``most``.

    A leading ``/`` (Keycloak's full group path) is dropped; names a principal could not hold are left out.
    """
    if not isinstance(value, list):
        return ()
    names = {g.lstrip("/") for g in value if isinstance(g, str)}
    return tuple(sorted(n for n in names if len(n) <= GROUP_NAME_BYTES and is_principal(GROUP_PREFIX + n)))[:most]
