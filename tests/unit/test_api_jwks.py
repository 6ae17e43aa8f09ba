"""A provider's JWKS fetched off the event loop (issue 35, item 5): a real HTTP provider on 127.0.0.1 that is slow,
down or rotates its key, and the API's routes in front of it. A slow fetch holds no other request, tokens that need
one share it, a failed fetch is not repeated per token, the last good keys serve while a refresh fails, and a
rotated key is looked up at once, however recently the keys were fetched at start-up or on expiry."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.callers.identity import build_verifier
from app.api.callers.jwks import KeySet, ProviderUnavailable
from app.api.main import create_app
from app.settings import Settings
from tests.unit.fake_read_model import FakeReadModel, View
from tests.unit.oidc_provider import AUDIENCE, Provider

pytestmark = pytest.mark.unit


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider()
    p.add_key("k1")
    yield p
    p.close()


def settings(provider: Provider, tmp_path: Path, **extra: Any) -> Settings:  # noqa: ANN401
    return Settings(**{"var_dir": tmp_path / "var", "oidc_issuer": [provider.issuer], "oidc_audience": [AUDIENCE],
                       "oidc_leeway_s": 5, "oidc_http_timeout_s": 5, **extra})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _timed(client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None,
                 ) -> tuple[httpx.Response, float]:
    t0 = time.monotonic()
    r = await client.get(path, headers=headers)
    return r, time.monotonic() - t0


def _client(s: Settings) -> httpx.AsyncClient:
    app = create_app(s, read_model=FakeReadModel({"doc": View({"t": 1}, 1, owner="alice")}))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


def test_a_slow_jwks_holds_no_other_request_and_tokens_share_one_fetch(provider: Provider, tmp_path: Path) -> None:
    """Six tokens arrive while the provider holds its JWKS answer: one fetch; an open route answers meanwhile.

    The provider answers only once the open route has (a gate, not a delay: a fetch run on the event loop would
    hold the open route until the gate opens, which it never would — the hang guard then fails the test; no
    timing threshold, so a loaded machine cannot fail it)."""
    provider.jwks_gate = gate = threading.Event()

    async def main() -> None:
        async with _client(settings(provider, tmp_path)) as client:
            reads = [asyncio.create_task(_timed(client, "/objects/doc", bearer(provider.token(jti=f"j{i}"))))
                     for i in range(6)]
            while provider.jwks_fetches == 0:  # the fetch is under way, and held
                await asyncio.sleep(0.01)
            open_route = await asyncio.wait_for(client.get("/asyncapi.json"), 120)  # a hang guard
            assert open_route.status_code == 200 and not gate.is_set()
            gate.set()
            for r, _ in await asyncio.gather(*reads):
                assert r.status_code == 200 and r.json() == {"t": 1}, r.text

    try:
        asyncio.run(main())
    finally:
        gate.set()
    assert provider.jwks_fetches == 1


def test_a_jwks_that_is_down_is_503_fast_and_not_fetched_per_token(provider: Provider, tmp_path: Path) -> None:
    provider.jwks_down = True

    async def main() -> None:
        async with _client(settings(provider, tmp_path, oidc_jwks_retry_s=60)) as client:
            for i in range(6):
                r, _ = await _timed(client, "/objects/doc", bearer(provider.token(jti=f"j{i}")))
                assert r.status_code == 503 and r.json()["code"] == "IDENTITY_PROVIDER_UNAVAILABLE", r.text
                if i == 0:  # every later fetch would be held (and counted): the failure is remembered
                    provider.jwks_gate = threading.Event()
            assert provider.jwks_fetches == 1  # the failure is remembered for ARBITER_OIDC_JWKS_RETRY_S
            assert 55 <= int(r.headers["retry-after"]) <= 60

    asyncio.run(main())


def test_the_last_good_keys_serve_while_a_refresh_fails(provider: Provider, tmp_path: Path) -> None:
    v = build_verifier(settings(provider, tmp_path, oidc_jwks_cache_s=0.3))
    assert v.verify(provider.token(jti="a")).principal == "alice"
    provider.jwks_down = True
    time.sleep(0.5)  # the keys are past ARBITER_OIDC_JWKS_CACHE_S: a refresh is due, and fails
    for i in range(3):
        assert v.verify(provider.token(jti=f"b{i}")).principal == "alice"  # not 503: k1 is still known
        time.sleep(0.1)
    assert provider.jwks_fetches >= 2  # the refresh was tried, in the background


def test_a_rotated_key_is_looked_up_at_once_after_the_start_up_and_expiry_fetches(provider: Provider,
                                                                                   tmp_path: Path) -> None:
    """Keycloak signs with a new key the moment it is made: the first token with it must not be refused for
    ARBITER_OIDC_JWKS_REFRESH_MIN_S because the keys were fetched at start-up or refreshed on expiry."""
    v = build_verifier(settings(provider, tmp_path, oidc_jwks_refresh_min_s=30, oidc_jwks_cache_s=0.5))
    v.warm()  # the start-up fetch
    provider.add_key("k2")
    assert v.verify(provider.token("k2", jti="a")).principal == "alice"
    assert provider.jwks_fetches == 2
    time.sleep(0.6)  # past the cache: the next token refreshes the keys (not a lookup either)
    assert v.verify(provider.token("k1", jti="b")).principal == "alice"
    _until(lambda: provider.jwks_fetches == 3)
    provider.add_key("k3")  # a second rotation within the interval of the first lookup: 503, not 401
    with pytest.raises(ProviderUnavailable) as e:
        v.verify(provider.token("k3", jti="c"))
    assert 1 <= int(e.value.headers["Retry-After"]) <= 30


def _until(done: Any, timeout: float = 5.0) -> None:  # noqa: ANN401 - a predicate
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _jwks(provider: Provider, *kids: str) -> dict[str, Any]:
    return {"keys": [provider.jwk(k) for k in kids]}


def test_the_cache_decisions_over_time(provider: Provider) -> None:
    """The pure cache logic on a fake clock: when a fetch may run, and what a request gets meanwhile."""
    provider.add_key("k2")
    clock, served, fails = _Clock(), ["k1"], [False]
    calls = []

    def fetch() -> dict[str, Any]:
        calls.append(clock.now)
        if fails[0]:
            raise OSError("down")
        return _jwks(provider, *served)

    keys = KeySet("test", fetch, concurrent.futures.ThreadPoolExecutor(1), cache_s=100, refresh_min_s=30, retry_s=5,
                  clock=clock)
    assert keys.key_blocking("k1").key_id == "k1" and calls == [1000.0]  # first fetch
    clock.now += 1
    served.append("k2")
    assert keys.key_blocking("k2").key_id == "k2" and len(calls) == 2  # lookup at once (first fetch not counted)
    clock.now += 1
    with pytest.raises(ProviderUnavailable) as e:  # another unknown kid 1 s after a lookup: 503 for 29 s
        keys.key_blocking("k9")
    assert e.value.headers["Retry-After"] == "29" and len(calls) == 2
    clock.now += 29
    with pytest.raises(Exception, match="no key 'k9'"):  # the interval passed: looked up, absent: 401
        keys.key_blocking("k9")
    assert len(calls) == 3
    with pytest.raises(Exception, match="no key 'k9'"):  # remembered: no fetch
        keys.key_blocking("k9")
    assert len(calls) == 3
    clock.now += 100  # expired; the provider is down: the last good keys answer, the refresh fails once
    fails[0] = True
    assert keys.key_blocking("k1").key_id == "k1"
    _until(lambda: len(calls) == 4 and keys._inflight is None)  # the refresh runs behind the answer
    assert keys.key_blocking("k1").key_id == "k1" and len(calls) == 4  # within retry_s: no new try
    with pytest.raises(ProviderUnavailable) as e:  # a kid the last good keys lack, while fetches fail
        keys.key_blocking("k7")
    assert e.value.headers["Retry-After"] == "5" and len(calls) == 4
    clock.now += 5
    fails[0] = False
    assert keys.key_blocking("k1").key_id == "k1"
    _until(lambda: len(calls) == 5)  # retried after retry_s
