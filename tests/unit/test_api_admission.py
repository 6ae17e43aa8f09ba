"""What a request must show before the API works for it (issue 35, items 9, 11, 12, 14 and the token cache): a
chunked body is read only after its token is checked, a cached token still expires, development tokens live at
most ``MAX_TOKEN_TTL_S``, published URLs come from ``ARBITER_PUBLIC_URL`` and never from ``Host``, and
``arbiter run`` tells how to reach the status page whichever issuer is trusted."""

from __future__ import annotations

import asyncio
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

from app.api.auth import Unauthorized
from app.api.identity import build_verifier, dev_token
from app.api.main import create_app
from app.cli import main as cli
from app.cli.run import closing_hints
from app.settings import MAX_TOKEN_TTL_S, Settings, get_settings

pytestmark = pytest.mark.unit

LIMIT = 4096  # ARBITER_MAX_OBJECT_BODY_BYTES here: every route but the batch route
CHUNK = 1024


def _call(app: Any, method: str, path: str, headers: dict[str, str], chunks: list[bytes],  # noqa: ANN401
          ) -> tuple[int, dict[str, Any] | None, int]:
    """Send ``chunks`` as a chunked body (no Content-Length) straight to the ASGI app; return the status, the
    problem body and how many chunks the app pulled."""
    pulled = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        if pulled < len(chunks):
            pulled += 1
            return {"type": "http.request", "body": chunks[pulled - 1], "more_body": pulled < len(chunks)}
        await asyncio.sleep(3600)  # the client has nothing more to say
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("t", 80),
             "client": ("127.0.0.1", 5), "headers": [(k.lower().encode(), v.encode()) for k, v in
                                                    {**headers, "transfer-encoding": "chunked"}.items()]}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], (json.loads(body) if body else None), pulled


@pytest.fixture(params=[True, False], ids=["fast-writes", "fastapi-routes"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    s = Settings(var_dir=tmp_path / "var", max_object_body_bytes=LIMIT, max_body_bytes=2 * LIMIT,
                 api_fast_writes=request.param)
    application = create_app(s)
    application.state.settings_for_test = s
    yield application


@pytest.mark.parametrize(("method", "path"), [("POST", "/objects"), ("PATCH", "/objects/a"),
                                              ("POST", "/commands:batch"), ("PUT", "/objects/a/readers/bob")])
def test_a_chunked_body_is_not_read_before_the_token_is_checked(app: Any, method: str, path: str) -> None:  # noqa: ANN401
    chunks = [b"x" * CHUNK] * 3  # under every limit: only the token decides
    for headers in ({}, {"Authorization": "Bearer not.a.jwt"}):
        status, problem, pulled = _call(app, method, path, {"content-type": "application/json", **headers}, chunks)
        assert (status, problem and problem["code"], pulled) == (401, "UNAUTHORIZED", 0)


def test_a_chunked_body_is_held_to_its_limit_at_and_past_it(app: Any) -> None:  # noqa: ANN401
    s = app.state.settings_for_test
    h = {"content-type": "application/json", "Authorization": f"Bearer {dev_token(s, 'alice', ttl_s=60)}"}
    at = [b" " * CHUNK] * (LIMIT // CHUNK - 1) + [b" " * (CHUNK - 2) + b"{x"]  # exactly LIMIT bytes, not JSON
    status, problem, pulled = _call(app, "POST", "/objects", h, at)
    assert (status, problem and problem["code"], pulled) == (400, "INVALID_JSON", len(at))
    past = [*at[:-1], at[-1] + b"}", b"{}"]  # one byte more, and more to come
    status, problem, pulled = _call(app, "POST", "/objects", h, past)
    assert (status, problem and problem["code"]) == (413, "BODY_TOO_LARGE")
    assert pulled == len(at)  # cut where the limit was passed: the rest is never read


def test_a_cached_token_still_expires(tmp_path: Path) -> None:
    """Verified tokens are kept until their ``exp`` (wall clock), not for ever: short lifetimes are the README's
    only answer to revocation."""
    s = Settings(var_dir=tmp_path / "var", oidc_leeway_s=0)
    v = build_verifier(s)
    token = dev_token(s, "alice", ttl_s=2)
    assert v.verify(token).principal == "alice"  # now cached
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    time.sleep(max(0.0, exp - time.time()) + 0.2)
    with pytest.raises(Unauthorized, match="expired"):
        v.verify(token)


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("ARBITER_VAR_DIR", str(tmp_path / "var"))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("cli_env")
def test_arbiter_token_ttl_is_bounded_at_max_token_ttl(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["token", "alice", "--ttl", str(MAX_TOKEN_TTL_S)]) == 0
    claims = jwt.decode(capsys.readouterr().out.strip(), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == MAX_TOKEN_TTL_S
    for ttl in (MAX_TOKEN_TTL_S + 1, 0, -5):
        with pytest.raises(SystemExit) as e:
            cli(["token", "alice", "--ttl", str(ttl)])
        assert e.value.code == 2
        out = capsys.readouterr()
        assert out.out == "" and "MAX_TOKEN_TTL_S" in out.err, out
    with pytest.raises(ValueError, match="MAX_TOKEN_TTL_S"):
        dev_token(get_settings(), "alice", ttl_s=MAX_TOKEN_TTL_S + 1)


@pytest.mark.parametrize("public_url", [None, "https://arbiter.example.com/api/"])
def test_published_urls_come_from_the_public_url_never_from_host(tmp_path: Path, public_url: str | None) -> None:
    s = Settings(var_dir=tmp_path / "var", public_url=public_url, api_port=8123)
    base = "https://arbiter.example.com/api" if public_url else "http://127.0.0.1:8123"
    client = TestClient(create_app(s))
    for host in (None, "evil.example.net", "evil.example.net:666"):
        h = {"Host": host} if host else {}
        doc = client.get("/.well-known/openid-configuration", headers=h).json()
        assert doc["jwks_uri"] == f"{base}/.well-known/jwks.json", (host, doc)
        api = client.get("/asyncapi.json", headers=h).json()
        assert api["servers"]["kafka"]["bindings"]["kafka"]["schemaRegistryUrl"] == f"{base}/registry", host


def test_arbiter_run_names_the_status_page_whichever_issuer_is_trusted(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8000"
    own = closing_hints(Settings(var_dir=tmp_path / "var"), url)
    assert own[0].startswith(f"Status page: {url}/#token=ey") and "Development token" in own[1]
    provider = Settings(var_dir=tmp_path / "var", oidc_issuer=["https://idp.example.com/realms/acme"])
    assert closing_hints(provider, url) == [f"Status page: {url}/#token=<a token with the scope arbiter:operate>"]
    remote = Settings(var_dir=tmp_path / "var", api_host="0.0.0.0")  # noqa: S104 - not loopback: no tokens
    assert closing_hints(remote, url) == [f"Status page: {url}/#token=<a token with the scope arbiter:operate>"]
