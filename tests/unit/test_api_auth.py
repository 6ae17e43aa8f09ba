"""Bearer JWTs of a provider whose discovery document and JWKS a local HTTP server serves: only a token signed by
one of its keys, for our audience, within its lifetime and with an allowed algorithm, yields a ``Caller``."""

from __future__ import annotations

import base64
import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.auth import OPERATE, READ, WRITE, Unauthorized, authenticate_header
from app.api.deps import ApiContext
from app.api.identity import build_verifier, dev_token
from app.api.jwks import ProviderUnavailable
from app.api.main import create_app
from app.api.tokens import TokenVerifier
from app.settings import Settings
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
                       "oidc_leeway_s": 5, **extra})


def verifier(provider: Provider, tmp_path: Path, **extra: Any) -> TokenVerifier:  # noqa: ANN401
    return build_verifier(settings(provider, tmp_path, **extra))


def refused(v: TokenVerifier, token: str, why: str) -> None:
    with pytest.raises(Unauthorized, match=why) as e:
        authenticate_header(f"Bearer {token}", v)
    assert e.value.error == "invalid_token"
    assert 'error="invalid_token"' in e.value.www_authenticate


def test_a_valid_token_gives_its_caller(provider: Provider, tmp_path: Path) -> None:
    caller = authenticate_header(f"Bearer {provider.token()}", verifier(provider, tmp_path))
    assert caller.principal == "alice" and caller.issuer == provider.issuer and caller.jti == "j-1"
    assert caller.scopes == {READ, WRITE}  # "openid" is no scope of Arbiter's
    assert caller.groups == ("team-a",)  # Keycloak's leading "/" dropped; "team b" cannot be a grantee


def test_an_expired_token_is_refused(provider: Provider, tmp_path: Path) -> None:
    now = int(time.time())
    refused(verifier(provider, tmp_path), provider.token(iat=now - 600, nbf=now - 600, exp=now - 60), "expired")


def test_a_token_not_yet_valid_is_refused(provider: Provider, tmp_path: Path) -> None:
    refused(verifier(provider, tmp_path), provider.token(nbf=int(time.time()) + 120), "not yet valid")


def test_a_token_issued_in_the_future_is_refused(provider: Provider, tmp_path: Path) -> None:
    refused(verifier(provider, tmp_path), provider.token(iat=int(time.time()) + 120), "not yet valid")


def test_a_token_for_another_audience_is_refused(provider: Provider, tmp_path: Path) -> None:
    refused(verifier(provider, tmp_path), provider.token(aud="someone-else"), "(?i)audience")


def test_a_token_without_an_audience_is_refused(provider: Provider, tmp_path: Path) -> None:
    refused(verifier(provider, tmp_path), provider.token(aud=None), "aud")


def test_a_token_of_another_issuer_is_refused_even_with_a_trusted_key(provider: Provider, tmp_path: Path) -> None:
    refused(verifier(provider, tmp_path), provider.token(iss=provider.base + "/realms/other"), "not trusted")


def test_an_unknown_kid_is_fetched_once_so_a_rotated_key_is_accepted(provider: Provider, tmp_path: Path) -> None:
    v = verifier(provider, tmp_path, oidc_jwks_refresh_min_s=0)
    assert v.verify(provider.token()).principal == "alice"
    assert provider.jwks_fetches == 1
    provider.add_key("k2")  # the provider rotates: k2 signs from now on
    assert v.verify(provider.token("k2", jti="j-2")).principal == "alice"
    assert provider.jwks_fetches == 2
    provider.add_key("k3", publish=False)  # a key the provider never published: refused after one more fetch
    refused(v, provider.token("k3"), "no key 'k3'")
    assert provider.jwks_fetches == 3


def test_the_keys_are_fetched_before_the_first_request(provider: Provider, tmp_path: Path) -> None:
    v = verifier(provider, tmp_path)
    assert provider.jwks_fetches == 0
    v.warm()
    assert provider.jwks_fetches == 1
    assert v.verify(provider.token()).principal == "alice" and provider.jwks_fetches == 1
    provider.close()  # a provider that is down at start is logged, not fatal
    verifier(provider, tmp_path / "other").warm()


def test_unknown_kids_refetch_the_jwks_at_most_once_per_refresh_interval(provider: Provider, tmp_path: Path) -> None:
    v = verifier(provider, tmp_path, oidc_jwks_refresh_min_s=3600)
    v.verify(provider.token())
    assert provider.jwks_fetches == 1  # the first fetch: it starts no interval
    provider.add_key("k2", publish=False)
    for i in range(5):  # one prompt lookup finds k2 absent; the kid is then refused without another
        refused(v, provider.token("k2", jti=f"x-{i}"), "no key 'k2'")
    assert provider.jwks_fetches == 2
    for i in range(5):  # a flood of other made-up kids costs the provider nothing: 503 until the interval ends
        provider.add_key(f"m{i}", publish=False)
        with pytest.raises(ProviderUnavailable) as e:
            v.verify(provider.token(f"m{i}", jti=f"m-{i}"))
        assert 3500 < int(e.value.headers["Retry-After"]) <= 3600
    assert provider.jwks_fetches == 2


def test_alg_none_is_refused(provider: Provider, tmp_path: Path) -> None:
    now = int(time.time())
    unsigned = jwt.encode({"iss": provider.issuer, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 60},
                          None, algorithm="none", headers={"kid": "k1"})
    refused(verifier(provider, tmp_path), unsigned, "algorithm 'none'")


def _hs256_with(secret: bytes, claims: dict[str, Any], kid: str) -> str:
    """Sign as HS256 with ``secret`` by hand: PyJWT itself refuses a PEM as an HMAC secret."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    import hashlib
    import hmac

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64(json.dumps(claims).encode())
    sig = b64(hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


def test_hs256_signed_with_the_public_key_is_refused(provider: Provider, tmp_path: Path) -> None:
    """Algorithm confusion: the public key is public, so an HMAC over it would let anyone sign."""
    now = int(time.time())
    claims = {"iss": provider.issuer, "aud": AUDIENCE, "sub": "mallory", "iat": now, "exp": now + 60}
    refused(verifier(provider, tmp_path), _hs256_with(provider.public_pem("k1"), claims, "k1"), "algorithm 'HS256'")


def test_hs_algorithms_cannot_be_allowed(provider: Provider, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="HS256"):
        verifier(provider, tmp_path, oidc_algorithms=["RS256", "HS256"])


def test_a_principal_claim_that_breaks_the_character_rules_is_refused(provider: Provider, tmp_path: Path) -> None:
    v = verifier(provider, tmp_path)
    for bad in ("alice smith", "a/b", "..", "x" * 129, "group:admins"):
        refused(v, provider.token(sub=bad, jti=bad), "not a principal")
    refused(v, provider.token(sub=None), "not a principal")


def test_the_principal_claim_is_configurable(provider: Provider, tmp_path: Path) -> None:
    v = verifier(provider, tmp_path, oidc_principal_claim="preferred_username")
    assert v.verify(provider.token(sub="5f1c-uuid", preferred_username="alice@acme")).principal == "alice@acme"


def test_a_named_issuer_namespaces_its_principals_always_and_a_bare_one_never(provider: Provider,
                                                                             tmp_path: Path) -> None:
    """Namespacing is a property of each configured issuer, not of how many are trusted: adding or removing the
    other issuer renames no one."""
    named = settings(provider, tmp_path, oidc_issuer=[f"kc={provider.issuer}"])
    assert build_verifier(named).verify(provider.token()).principal == "kc:alice"  # named: even alone
    both = settings(provider, tmp_path, oidc_issuer=[f"kc={provider.issuer}"], local_issuer=True)
    v = build_verifier(both)
    assert v.verify(provider.token()).principal == "kc:alice"
    local = dev_token(both.model_copy(update={"oidc_audience": [AUDIENCE]}), "alice")
    assert v.verify(local).principal == "alice"  # the bare local issuer keeps bare names beside a named one
    assert build_verifier(settings(provider, tmp_path)).verify(provider.token()).principal == "alice"  # bare, alone
    dev = both.model_copy(update={"local_issuer_name": "dev", "oidc_audience": [AUDIENCE]})
    assert build_verifier(dev).verify(dev_token(dev, "alice")).principal == "dev:alice"


def test_the_development_issuer_is_checked_like_a_provider(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    v = build_verifier(s)
    caller = v.verify(dev_token(s, "bob", ttl_s=60))
    assert caller.principal == "bob" and caller.issuer == "urn:arbiter:local" and caller.jti
    other = Settings(var_dir=tmp_path / "other")  # another key pair: its tokens mean nothing here
    refused(v, dev_token(other, "bob", ttl_s=60), "no key")
    refused(v, dev_token(s, "bob", ttl_s=-120), "expired")


def test_no_or_malformed_credentials_are_401_with_rfc6750_errors(provider: Provider, tmp_path: Path) -> None:
    v = verifier(provider, tmp_path)
    with pytest.raises(Unauthorized) as e:
        authenticate_header(None, v)
    assert e.value.error is None and e.value.www_authenticate == 'Bearer realm="arbiter"'
    with pytest.raises(Unauthorized) as e:
        authenticate_header("Basic YWxpY2U6eA==", v)
    assert e.value.error == "invalid_request"
    refused(v, "not.a.jwt", "not a JWT")


def test_a_missing_scope_is_403_insufficient_scope(provider: Provider, tmp_path: Path) -> None:
    app = create_app(settings(provider, tmp_path))
    app.state.ctx = None  # no producer: each request here is refused before one is needed
    client = TestClient(app)
    reader = {"Authorization": f"Bearer {provider.token(scope='arbiter:read')}"}
    for method, path, body in [("POST", "/objects", {"document": {}}), ("PUT", "/objects/a/readers/bob", None),
                               ("POST", "/commands:batch", {"commands": [{"kind": "delete", "object_id": "a"}]}),
                               ("GET", "/status.json", None), ("GET", "/metrics", None)]:
        r = client.request(method, path, json=body, headers=reader)
        assert r.status_code == 403 and r.json()["code"] == "INSUFFICIENT_SCOPE", (path, r.text)
        assert 'error="insufficient_scope"' in r.headers["www-authenticate"]
    operator = {"Authorization": f"Bearer {provider.token(scope=OPERATE, jti='j-op')}"}
    r = client.get("/objects/a", headers=operator)
    assert r.status_code == 403 and r.json()["scope"] == READ
    r = client.get("/objects/a", headers={"Authorization": "Bearer " + provider.token(aud="x")})
    assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]


def test_the_scraper_token_reads_metrics_and_nothing_else(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    app = create_app(s)
    app.state.ctx = ApiContext(s, None, app.state.outcomes, app.state.metrics, app.state.quotas)  # type: ignore[arg-type]
    client = TestClient(app)
    scraper = {"Authorization": f"Bearer {dev_token(s, 'prometheus', ('arbiter:metrics',), 60)}"}
    assert client.get("/metrics", headers=scraper).status_code == 200
    for path in ("/status.json", "/objects/a", "/commands/c"):
        assert client.get(path, headers=scraper).json()["code"] == "INSUFFICIENT_SCOPE", path


def test_the_api_publishes_the_development_issuers_keys(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    client = TestClient(create_app(s))
    doc = client.get("/.well-known/openid-configuration").json()
    assert doc["issuer"] == "urn:arbiter:local" and doc["jwks_uri"].endswith("/.well-known/jwks.json")
    keys = client.get("/.well-known/jwks.json").json()["keys"]
    token = dev_token(s, "alice", ttl_s=60)
    assert [k["kid"] for k in keys] == [jwt.get_unverified_header(token)["kid"]]
    assert all("d" not in k for k in keys)  # public halves only
