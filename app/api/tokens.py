"""Verifying bearer JWTs of trusted OIDC issuers with PyJWT: keys from each issuer's JWKS, claims to a ``Caller``.

Every issuer, the providers of ``ARBITER_OIDC_ISSUER`` and Arbiter's own development issuer alike, goes through
``TokenVerifier``; they differ only in where their JWKS comes from (discovery over HTTP, or the local key files,
``app.api.local_issuer``). ``iss``, ``aud``, ``exp``, ``nbf`` and ``iat`` are checked with ``ARBITER_OIDC_LEEWAY_S``
of skew; only the algorithms of ``ARBITER_OIDC_ALGORITHMS`` are accepted (asymmetric only: never ``none``, never
``HS*`` with keys from a JWKS). Keys are fetched off the event loop (``app.api.jwks.KeySet``: single-flight, the
last good set kept, a prompt rate-limited lookup of an unknown ``kid``, 503 while a key cannot be looked up).
A named issuer's principals and groups are namespaced with its name (``corp:alice``, ``corp:finance``), always.
Verified tokens are kept (bounded LRU) until they expire: a client's next request costs a dict lookup.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import jwt

from app.api.auth import SCOPES, Caller, Unauthorized, is_principal
from app.api.jwks import KeySet
from app.limits import GROUP_NAME_BYTES, ISSUER_BYTES, JTI_BYTES
from commands.access import GROUP_PREFIX

log = logging.getLogger(__name__)

#: The only algorithms ``ARBITER_OIDC_ALGORITHMS`` may name: asymmetric signatures, whose keys a JWKS publishes.
ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
DISCOVERY_PATH = "/.well-known/openid-configuration"
#: Largest discovery document or JWK Set read from a provider.
MAX_JWKS_BYTES = 1024 * 1024
#: Longest ``kid`` looked up (a JWK's kid is an opaque string; providers use tens of characters).
MAX_KID_CHARS = 256


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """How a verified token's claims become a ``Caller``."""

    principal_claim: str = "sub"
    groups_claim: str = "groups"
    max_groups: int = 32
    leeway_s: int = 60


class _Discovered:
    """The JWK Set of an issuer found by OIDC discovery (``jwks_uri`` of its openid-configuration), fetched over
    HTTP: a blocking call, made by ``KeySet`` on a worker thread."""

    def __init__(self, issuer: str, timeout_s: float) -> None:
        self.issuer, self.timeout_s = issuer, timeout_s
        self.jwks_uri: str | None = None

    def _get(self, url: str) -> Any:  # noqa: ANN401 - any JSON value
        with urllib.request.urlopen(url, timeout=self.timeout_s) as r:  # noqa: S310 - http(s) checked
            data = r.read(MAX_JWKS_BYTES + 1)
        if len(data) > MAX_JWKS_BYTES:
            raise ValueError(f"{url} answered more than {MAX_JWKS_BYTES} bytes")
        return json.loads(data)

    def __call__(self) -> Any:  # noqa: ANN401 - a JWK Set, checked by the caller
        if self.jwks_uri is None:
            doc = self._get(self.issuer.rstrip("/") + DISCOVERY_PATH)
            if not isinstance(doc, dict) or not isinstance(doc.get("jwks_uri"), str):
                raise ValueError("its discovery document names no jwks_uri")
            if doc.get("issuer") != self.issuer:
                raise ValueError(f"its discovery document's issuer is {doc.get('issuer')!r}, not {self.issuer!r}")
            if urlparse(doc["jwks_uri"]).scheme not in ("http", "https"):
                raise ValueError(f"its jwks_uri {doc['jwks_uri']!r} is not an http(s) URL")
            self.jwks_uri = doc["jwks_uri"]
        return self._get(self.jwks_uri)


class TrustedIssuer:
    """One issuer Arbiter trusts: its ``iss``, the namespace of its principals and groups (``name``; None = bare
    names), whether its groups claim is believed, and its keys."""

    def __init__(self, issuer: str, name: str | None, keys: KeySet, *, trust_groups: bool = True) -> None:
        self.issuer, self.name, self.keys, self.trust_groups = issuer, name, keys, trust_groups

    def warm(self) -> None:
        """Fetch the keys now (at start, off the event loop), so a first request does not wait on them."""
        if not self.keys.warm():
            log.warning("could not fetch the keys of %s yet (the first token will try again)", self.issuer)


def http_issuer(issuer: str, name: str | None, executor: concurrent.futures.Executor, *, cache_s: float = 300,
                refresh_min_s: float = 30, retry_s: float = 5, timeout_s: float = 5,
                trust_groups: bool = True) -> TrustedIssuer:
    """Return a trusted issuer whose keys are found by OIDC discovery (``https``, or ``http`` for a local test)."""
    if urlparse(issuer).scheme not in ("http", "https"):
        raise ValueError(f"issuer {issuer!r} is not an http(s) URL")
    keys = KeySet(issuer, _Discovered(issuer, timeout_s), executor, cache_s=cache_s, refresh_min_s=refresh_min_s,
                  retry_s=retry_s, wait_s=timeout_s)
    return TrustedIssuer(issuer, name, keys, trust_groups=trust_groups)


def file_issuer(issuer: str, name: str | None, load: Callable[[], dict[str, Any]],
                executor: concurrent.futures.Executor, *, cache_s: float = 300, refresh_min_s: float = 30,
                retry_s: float = 5, trust_groups: bool = True) -> TrustedIssuer:
    """Return a trusted issuer whose JWKS is ``load()`` (Arbiter's development issuer), checked the same way."""
    keys = KeySet(issuer, load, executor, cache_s=cache_s, refresh_min_s=refresh_min_s, retry_s=retry_s)
    return TrustedIssuer(issuer, name, keys, trust_groups=trust_groups)


class TokenVerifier:
    """Verify bearer JWTs of the trusted issuers and return their ``Caller``; one per API process.

    ``averify`` is the API's: a key that must be fetched is awaited off the event loop. ``verify`` waits on the
    calling thread (the CLI and tests).
    """

    def __init__(self, issuers: list[TrustedIssuer], *, audiences: list[str], algorithms: list[str],
                 rules: ClaimRules = ClaimRules(), cache_size: int = 10_000) -> None:  # noqa: B008 - frozen
        refused = set(algorithms) - ASYMMETRIC
        if refused or not algorithms:
            raise ValueError(f"algorithms {sorted(refused) or '[]'} are not allowed; use some of {sorted(ASYMMETRIC)}")
        if any(len(i.issuer.encode()) > ISSUER_BYTES for i in issuers):
            raise ValueError(f"an issuer is longer than {ISSUER_BYTES} bytes")
        if not issuers or not audiences:
            raise ValueError("at least one trusted issuer and one audience are required")
        bare = [i.issuer for i in issuers if i.name is None]
        if len(bare) > 1:
            raise ValueError(f"{len(bare)} trusted issuers have no name ({bare}), so their principals and groups "
                             "would share one namespace; name all but one: ARBITER_OIDC_ISSUER='corp=https://...' "
                             "(or ARBITER_LOCAL_ISSUER_NAME)")
        names = [i.name for i in issuers if i.name is not None]
        if len(set(names)) != len(names):
            raise ValueError(f"two trusted issuers share a name ({names})")
        self._issuers = {i.issuer: i for i in issuers}
        #: A bare issuer's principal or group may not look like one of a named issuer's (``corp:alice``).
        self._reserved = tuple(f"{n}:" for n in names)
        self._audiences, self._algorithms, self._rules = list(audiences), list(algorithms), rules
        self._cache: OrderedDict[str, Caller] = OrderedDict()
        self._cache_size = cache_size

    def warm(self) -> None:
        """Fetch every trusted issuer's keys now; blocking, so call it off the event loop."""
        for issuer in self._issuers.values():
            issuer.warm()

    def _cached(self, token: str) -> Caller | None:
        cached = self._cache.get(token)
        if cached is not None:
            if cached.expires_at > time.time():  # wall clock: exp is a Unix time
                self._cache.move_to_end(token)
                return cached
            del self._cache[token]
        return None

    def _keep(self, token: str, caller: Caller) -> Caller:
        self._cache[token] = caller
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return caller

    async def averify(self, token: str) -> Caller:
        """Return the ``Caller`` of ``token``; raise ``Unauthorized`` (or ``app.api.jwks.ProviderUnavailable``,
        503). A key to fetch is awaited off the event loop."""
        cached = self._cached(token)
        if cached is not None:
            return cached
        header, trusted = self._unverified(token)
        key = await trusted.keys.key(header["kid"])
        return self._keep(token, self._checked(token, key, trusted))

    def verify(self, token: str) -> Caller:
        """``averify`` for a caller without an event loop: a key to fetch is waited for on this thread."""
        cached = self._cached(token)
        if cached is not None:
            return cached
        header, trusted = self._unverified(token)
        key = trusted.keys.key_blocking(header["kid"])
        return self._keep(token, self._checked(token, key, trusted))

    def _unverified(self, token: str) -> tuple[dict[str, Any], TrustedIssuer]:
        """Return the token's header and trusted issuer, checked before any key is looked up."""
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
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid or len(kid) > MAX_KID_CHARS:
            raise Unauthorized("the token's header names no key (kid)")
        return header, trusted

    def _checked(self, token: str, key: jwt.PyJWK, trusted: TrustedIssuer) -> Caller:
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
        principal = f"{trusted.name}:{value}" if trusted.name is not None and isinstance(value, str) else value
        if not is_principal(principal) or (isinstance(value, str) and (
                value.startswith(GROUP_PREFIX) or (trusted.name is None and value.startswith(self._reserved)))):
            raise Unauthorized(f"the token's {rules.principal_claim!r} claim is not a principal "
                               "(1-128 characters of [A-Za-z0-9._@:+-], not starting with 'group:' or a named "
                               "issuer's 'name:')")
        assert isinstance(principal, str)
        jti = claims.get("jti")
        if isinstance(jti, str) and len(jti.encode("utf-8", "surrogatepass")) > JTI_BYTES:
            jti = hashlib.sha256(jti.encode("utf-8", "surrogatepass")).hexdigest()
        groups = _groups(claims.get(rules.groups_claim), rules.max_groups, trusted.name,
                         () if trusted.name is not None else self._reserved) if trusted.trust_groups else ()
        return Caller(principal, _scopes(claims), groups, trusted.issuer, jti if isinstance(jti, str) else None,
                      float(claims["exp"]))


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


def _groups(value: object, most: int, namespace: str | None, reserved: tuple[str, ...]) -> tuple[str, ...]:
    """Return the caller's groups that can be grantees (``group:<name>`` is a principal), sorted, at most ``most``.

    A leading ``/`` (Keycloak's full group path) is dropped; a named issuer's groups are namespaced as its
    principals are (``corp:finance``); names a principal could not hold, over ``GROUP_NAME_BYTES`` once
    namespaced, or (from a bare issuer) looking like a named issuer's (``reserved``) are left out.
    """
    if not isinstance(value, list):
        return ()
    names = {g.lstrip("/") for g in value if isinstance(g, str)}
    if reserved:
        names = {n for n in names if not n.startswith(reserved)}
    if namespace is not None:
        names = {f"{namespace}:{n}" for n in names if n}
    return tuple(sorted(n for n in names if len(n) <= GROUP_NAME_BYTES and is_principal(GROUP_PREFIX + n)))[:most]
