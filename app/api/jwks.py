"""One trusted issuer's JWK Set, fetched off the event loop: single-flight, the last good set kept, a cooldown after
a failed fetch, and a prompt, rate-limited lookup when a token names a ``kid`` the set does not hold.

Every fetch runs on a worker thread (``Executor``); a request that needs one awaits it (``KeySet.key``) without
holding the event loop, and requests that need a fetch while one runs join it (one fetch per issuer at a time).
What a request gets for its ``kid``:

- the key, if the last good set holds it (a set older than ``cache_s`` is refreshed in the background meanwhile,
  and kept while a refresh fails);
- 401 (``Unauthorized``) if a fetch that began after the request arrived does not hold it (the kid is not the
  issuer's), and for that kid again until the next successful fetch;
- 503 with ``Retry-After`` (``ProviderUnavailable``) while no fetch can answer: the last one failed less than
  ``retry_s`` ago, a lookup for an unknown kid ran less than ``refresh_min_s`` ago, or the fetch outlasts
  ``wait_s``. A client reads 401 ``invalid_token`` as "my token is bad"; a key Arbiter could not look up is not that.

Only lookups for unknown kids start the ``refresh_min_s`` interval: the first fetch, a refresh of an expired set and
a failed fetch never delay the lookup a newly rotated key needs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from app.api.auth import Unauthorized
from app.api.problems import ApiError

log = logging.getLogger(__name__)

#: Kids a lookup found absent, remembered (401 at once) until the next successful fetch; a bound on the memory.
ABSENT_KIDS = 1024


class ProviderUnavailable(ApiError):
    """The identity provider's discovery document or JWKS could not be fetched: 503, the token is not judged."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message, code="IDENTITY_PROVIDER_UNAVAILABLE",
                         headers={"Retry-After": str(max(1, math.ceil(retry_after_s)))})


@dataclass(frozen=True, slots=True)
class _Wait:
    """A fetch runs: wait for it, then decide again."""

    future: concurrent.futures.Future[None]


@dataclass(frozen=True, slots=True)
class _Unavailable:
    retry_after_s: float
    why: str


@dataclass(frozen=True, slots=True)
class _Absent:
    pass


def parse_jwks(data: object) -> dict[str, jwt.PyJWK]:
    """Return the signing keys of a JWK Set by kid; raise ``ValueError`` if it holds none Arbiter can use."""
    if not isinstance(data, Mapping) or not isinstance(data.get("keys"), list):
        raise ValueError("not a JWK Set (no 'keys' list)")
    keys: dict[str, jwt.PyJWK] = {}
    for jwk in data["keys"]:
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or jwk.get("use", "sig") != "sig":
            continue
        try:
            keys[jwk["kid"]] = jwt.PyJWK(jwk)
        except jwt.PyJWTError:  # a key type or algorithm PyJWT cannot use: the others still count
            continue
    if not keys:
        raise ValueError("the JWK Set holds no usable signing key with a kid")
    return keys


class KeySet:
    """One issuer's keys; ``fetch`` (blocking: HTTP or files) returns its JWK Set and runs on ``executor``."""

    def __init__(self, label: str, fetch: Callable[[], Any], executor: concurrent.futures.Executor, *,
                 cache_s: float = 300, refresh_min_s: float = 30, retry_s: float = 5, wait_s: float = 5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self._fetch, self._executor, self._clock = fetch, executor, clock
        self._cache_s, self._refresh_min_s, self._retry_s, self._wait_s = cache_s, refresh_min_s, retry_s, wait_s
        self._lock = threading.Lock()
        self._keys: dict[str, jwt.PyJWK] | None = None
        self._fetched_at = self._keys_from = self._failed_at = self._lookup_at = -math.inf
        self._absent: set[str] = set()
        self._inflight: concurrent.futures.Future[None] | None = None
        self.fetches = 0  # started, for tests and logs

    # --- deciding (under the lock, never blocking) ---------------------------------------------------------
    def _decide(self, kid: str, arrived: float) -> jwt.PyJWK | _Wait | _Unavailable | _Absent:
        with self._lock:
            now = self._clock()
            keys = self._keys
            if keys is not None and kid in keys:
                if now - self._fetched_at >= self._cache_s and self._inflight is None \
                        and now - self._failed_at >= self._retry_s:
                    self._start(now)  # refreshed behind the request: the last good set answers meanwhile
                return keys[kid]
            if self._inflight is not None:
                return _Wait(self._inflight)
            if self._keys_from >= arrived or kid in self._absent:
                if len(self._absent) < ABSENT_KIDS:
                    self._absent.add(kid)
                return _Absent()
            if now - self._failed_at < self._retry_s:
                return _Unavailable(self._retry_s - (now - self._failed_at), "its last fetch failed")
            if keys is None or now - self._fetched_at >= self._cache_s:
                return _Wait(self._start(now))  # the first fetch, or a refresh: not a lookup, no interval starts
            if now - self._lookup_at >= self._refresh_min_s:
                self._lookup_at = now
                return _Wait(self._start(now))
            return _Unavailable(self._refresh_min_s - (now - self._lookup_at),
                                "its keys were looked up for an unknown kid moments ago")

    def _start(self, now: float) -> concurrent.futures.Future[None]:
        self.fetches += 1
        future = self._executor.submit(self._run, now)
        self._inflight = future
        return future

    def _run(self, started: float) -> None:
        """Fetch the set (on a worker thread) and keep it, or note the failure; the old set stays either way."""
        try:
            keys = parse_jwks(self._fetch())
        except Exception as e:  # noqa: BLE001 - whatever the fetch raised: a failed fetch, told to the requests
            log.warning("could not fetch the keys of %s: %s", self.label, e)
            with self._lock:
                self._failed_at, self._inflight = self._clock(), None
            return
        with self._lock:
            self._keys, self._fetched_at, self._keys_from = keys, self._clock(), started
            self._absent.clear()
            self._inflight = None

    def _answer(self, kid: str, decision: jwt.PyJWK | _Unavailable | _Absent) -> jwt.PyJWK:
        if isinstance(decision, _Absent):
            raise Unauthorized(f"no key {kid!r} in the JWKS of {self.label}")
        if isinstance(decision, _Unavailable):
            raise ProviderUnavailable(f"cannot look up key {kid!r} of {self.label} now: {decision.why}",
                                      decision.retry_after_s)
        return decision

    # --- asking -------------------------------------------------------------------------------------------
    async def key(self, kid: str) -> jwt.PyJWK:
        """Return the key ``kid``, awaiting a fetch off the event loop if one is needed; raise ``Unauthorized`` or
        ``ProviderUnavailable``."""
        arrived = self._clock()
        for _ in range(3):  # a fetch that began after arrival decides; joining an older one may need one more
            decision = self._decide(kid, arrived)
            if not isinstance(decision, _Wait):
                return self._answer(kid, decision)
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(decision.future)), self._wait_s)
            except TimeoutError as e:
                raise ProviderUnavailable(f"the keys of {self.label} did not arrive within {self._wait_s:g} s",
                                          self._retry_s) from e
        raise ProviderUnavailable(f"cannot look up key {kid!r} of {self.label} now", self._retry_s)

    def key_blocking(self, kid: str) -> jwt.PyJWK:
        """``key`` for a caller without an event loop (the CLI, tests): the same decisions, waiting on the thread."""
        arrived = self._clock()
        for _ in range(3):
            decision = self._decide(kid, arrived)
            if not isinstance(decision, _Wait):
                return self._answer(kid, decision)
            try:
                decision.future.result(self._wait_s)
            except concurrent.futures.TimeoutError as e:
                raise ProviderUnavailable(f"the keys of {self.label} did not arrive within {self._wait_s:g} s",
                                          self._retry_s) from e
        raise ProviderUnavailable(f"cannot look up key {kid!r} of {self.label} now", self._retry_s)

    def warm(self) -> bool:
        """Fetch the set now unless a fresh one is held (at start, off the event loop); return True if one is held."""
        with self._lock:
            future = self._inflight
            if future is None and (self._keys is None or self._clock() - self._fetched_at >= self._cache_s):
                future = self._start(self._clock())
        if future is not None:
            try:
                future.result(self._wait_s)
            except concurrent.futures.TimeoutError:
                pass
        return self._keys is not None
