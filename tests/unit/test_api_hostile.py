"""Hostile clients that need no broker: a body without a token is never read, and single-object routes take one
document's worth of body, not a batch's (issue 25)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api import json_body
from app.api.auth import issue_token
from app.api.main import create_app
from app.limits import for_settings
from app.settings import Settings

pytestmark = pytest.mark.unit

SETTINGS = Settings()
NO_TOKEN: list[dict[str, str]] = [{}, {"Authorization": "Bearer forged.token"}, {"Authorization": "Basic eDp5"}]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """The app without its lifespan: what is tested here is refused before any producer is needed."""
    app = create_app(SETTINGS)
    app.state.ctx = None  # no producer: every request here is refused before one is needed
    yield TestClient(app, raise_server_exceptions=True)


def auth(principal: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SETTINGS.auth_secret.get_secret_value(), principal, 60)}"}


@pytest.mark.parametrize("headers", NO_TOKEN)
@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/objects", b'{"document": {"x": NaN}}'),
    ("POST", "/objects", b'{"document": {'),
    ("PATCH", "/objects/a", b'{"x": 1e400}'),
    ("POST", "/commands:batch", b'{"commands": [{"kind": "create", "document": {"x": NaN}}]}'),
])
def test_no_token_is_401_before_the_body_is_read(client: TestClient, monkeypatch: pytest.MonkeyPatch,
                                                 headers: dict[str, str], method: str, path: str, body: bytes) -> None:
    """A NaN body without a token was 422 (parsed, walked and refused first): now 401, and never parsed."""
    parsed: list[bytes] = []
    real = json_body.parse_body
    monkeypatch.setattr(json_body, "parse_body", lambda raw: parsed.append(raw) or real(raw))
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    r = client.request(method, path, content=body, headers={**headers, "Content-Type": content_type})
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED", r.text
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert parsed == []
    # with a token the same body is parsed and refused for what it is
    r = client.request(method, path, content=body, headers={**auth("alice"), "Content-Type": content_type})
    assert r.status_code in (400, 422) and parsed == [body], r.text


def test_single_object_routes_take_one_documents_body_the_batch_route_more(client: TestClient) -> None:
    """Over one document + 1 KiB is 413 on /objects; the batch route's limit is ARBITER_MAX_BODY_BYTES."""
    largest_doc = for_settings(SETTINGS).max_document_bytes
    limit = largest_doc + 1024
    assert limit < SETTINGS.max_body_bytes
    body = b'{"document": {"x": "' + b"a" * (limit - 22) + b'"}}'
    assert limit < len(body) <= SETTINGS.max_body_bytes
    for path in ("/objects", "/objects/a"):
        r = client.request("POST" if path == "/objects" else "PATCH", path, content=body, headers={
            **auth("alice"), "Content-Type": "application/json" if path == "/objects" else "application/merge-patch+json"})
        assert r.status_code == 413 and r.json()["code"] == "BODY_TOO_LARGE", r.text
        assert str(limit) in r.json()["detail"]
    # the batch route reads the same number of bytes (and refuses them for their shape, not their size)
    r = client.post("/commands:batch", content=body, headers={**auth("alice"), "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
