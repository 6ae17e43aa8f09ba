"""The plain-ASGI write path (``app.api.writes.fast_writes``) answers exactly as the FastAPI routes do, and serves the
common case itself (issue 25: the API's CPU per write).

Two apps on the real broker, one with ``api_fast_writes`` and one without, get the same requests, well-formed and
hostile; their answers must match (status, problem code and fields, Location, ETag, the produced command). A spy on
the FastAPI routes' command builders proves that the fast app answered the common cases without them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from app.api.routes import objects
from app.limits import for_settings
from app.settings import Settings
from schemas import codec
from tests.integration.test_api_support import TestClient, api_client, auth, consume_all

pytestmark = pytest.mark.integration

JSON = {"Content-Type": "application/json"}
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PATCH = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
def clients(settings: Settings) -> Iterator[tuple[TestClient, TestClient, Settings]]:
    with api_client(settings) as fast, api_client(settings.model_copy(update={"api_fast_writes": False})) as routes:
        yield fast, routes, settings


def _cases(s: Settings) -> list[tuple[str, str, dict[str, str], bytes | None]]:
    a = auth(s, "alice")
    big = max(0, for_settings(s).max_document_bytes - 10)
    deep: Any = 1
    for _ in range(40):
        deep = {"d": deep}
    return [
        # the common case: served by the fast path
        ("POST", "/objects", {**a, **JSON, "Idempotency-Key": "k-1"}, b'{"id": "o1", "document": {"n": 1}}'),
        ("POST", "/objects", {**a, **JSON, "Idempotency-Key": "k-2"}, b'{"document": {"t": "\\u00e9"}}'),
        ("POST", "/objects", {**a, "Content-Type": "application/json; charset=utf-8", "Idempotency-Key": "k-3",
                              "If-Match": '"0"', "Prefer": "wait=0.2"}, b'{"id": "o3", "document": {}}'),
        ("PATCH", "/objects/o1", {**a, **PATCH, "Idempotency-Key": "k-4", "If-Match": '"1"'}, b'{"n": null}'),
        ("PATCH", "/objects/o1", {**a, **JSON, "Idempotency-Key": "k-5"}, b'{"x": [1, 2.5, "y"]}'),
        ("DELETE", "/objects/o1", {**a, "Idempotency-Key": "k-6", "If-Match": '"2"'}, None),
        ("DELETE", "/objects/o~1:x@y", {**a, "Idempotency-Key": "k-7"}, None),
        # refused by the fast path itself, as the routes refuse them
        ("POST", "/objects", {**auth(s, "reader", scopes=("arbiter:read",)), **JSON, "Idempotency-Key": "k-9"},
         b'{"id": "ro", "document": {}}'),
        ("DELETE", "/objects/o1", {**auth(s, "reader", scopes=("arbiter:read",)), "Idempotency-Key": "k-10"}, None),
        ("POST", "/objects", {**JSON}, b'{"document": {"x": NaN}}'),
        ("POST", "/objects", {"Authorization": "Bearer forged.token", **JSON}, b'{"document": {}}'),
        ("POST", "/objects", {"Authorization": "Basic eDp5", **JSON}, b'{"document": {}}'),
        ("DELETE", "/objects/o1", {}, None),
        ("POST", "/objects", {**a, **JSON}, b'{"document": {'),
        ("POST", "/objects", {**a, **JSON}, b'\xff\xfe'),
        ("POST", "/objects", {**a, **JSON}, b'{"document": {"x": NaN}}'),
        ("POST", "/objects", {**a, **JSON}, b'{"document": {"x": 1e400}}'),
        ("POST", "/objects", {**a, **JSON}, b'{"document": {"x": "\\ud800"}}'),
        ("PATCH", "/objects/o1", {**a, **PATCH}, b'{"x": "\\u0000"}'),
        ("POST", "/objects", {**a, **JSON, "Idempotency-Key": "k-8"},
         json.dumps({"id": "big", "document": {"b": "x" * big}}).encode()),
        # handed on to the FastAPI routes, which answer them
        ("POST", "/objects", {**a, **JSON}, b'{"document": {}, "principal": "bob"}'),
        ("POST", "/objects", {**a, **JSON}, b'{"id": "bad id", "document": {}}'),
        ("POST", "/objects", {**a, **JSON}, b'{"id": "o9"}'),
        ("POST", "/objects", {**a, **JSON}, b'[1, 2]'),
        ("POST", "/objects", {**a, **JSON}, json.dumps({"document": deep}).encode()),
        ("PATCH", "/objects/o1", {**a, **PATCH}, b'[1]'),
        ("PATCH", "/objects/o1", {**a, **PATCH}, json.dumps(deep).encode()),
        ("POST", "/objects", {**a, **JSON, "If-Match": "3"}, b'{"document": {}}'),
        ("POST", "/objects", {**a, **JSON, "Idempotency-Key": "has space"}, b'{"document": {}}'),
        ("DELETE", "/objects/o1", {**a, "If-Match": '"x"'}, None),
        ("POST", "/objects", {**a, "Content-Type": "text/plain"}, b'{"document": {}}'),
        ("POST", "/objects", {**a}, b'{"id": "no-type", "document": {}}'),
        ("POST", "/objects", {**a, **JSON}, b""),
        ("PATCH", "/objects/a%0A", {**a, **PATCH}, b'{"n": 1}'),
        ("DELETE", "/objects/a%0A", {**a}, None),
        ("PUT", "/objects", {**a, **JSON}, b'{"document": {}}'),
        ("PATCH", "/objects/", {**a, **PATCH}, b'{"n": 1}'),
    ]


def _answer(r: Any) -> dict[str, Any]:  # noqa: ANN401 - an httpx Response
    body: Any = None
    if r.content:
        body = r.json()
        if isinstance(body, dict):
            body.pop("offset", None)  # where on the topic: the two apps' records are two records
            body.pop("partition", None)
            if body.get("code") in ("INVALID_REQUEST", "INVALID_JSON"):
                body["errors"] = [{k: e[k] for k in ("loc", "type")} for e in body.get("errors", [])]
    keep = ("content-type", "location", "etag", "www-authenticate", "retry-after", "allow")
    return {"status": r.status_code, "body": body, "headers": {k: r.headers.get(k) for k in keep}}


def test_the_fast_path_answers_as_the_routes_do(clients: tuple[TestClient, TestClient, Settings]) -> None:
    fast, routes, s = clients
    for method, path, headers, content in _cases(s):
        mine = _answer(fast.request(method, path, headers=headers, content=content))
        theirs = _answer(routes.request(method, path, headers=headers, content=content))
        assert mine == theirs, (method, path, headers, content[:200] if content else content)
    # the same commands reached the topic from both apps, field for field (ids and times aside)
    records = consume_all(s, s.topic_commands, 2 * 8)
    produced = [codec.decode_command(m.value()) for m in records]
    by_id: dict[str, list[Any]] = {}
    for c in produced:
        by_id.setdefault(c.command_id, []).append(dataclasses.replace(c, issued_at=EPOCH))
    assert sorted(by_id) == [f"k-{i}" for i in (1, 2, 3, 4, 5, 6, 7, 8)]
    assert all(len(cs) == 2 and cs[0] == cs[1] for cs in by_id.values()), by_id


def test_the_common_case_never_reaches_the_routes(clients: tuple[TestClient, TestClient, Settings],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fast, routes, s = clients

    def refuse(*_: object) -> None:
        raise AssertionError("a FastAPI write route built this command")

    for name in ("create_command", "update_command", "delete_command"):
        monkeypatch.setattr(objects, name, refuse)
    common = _cases(s)[:7]
    for method, path, headers, content in common:
        r = fast.request(method, path, headers=headers, content=content)
        assert r.status_code == 202, r.text
    with pytest.raises(AssertionError, match="FastAPI write route"):
        routes.request(*common[0][:2], headers=common[0][2], content=common[0][3])
    # the request metrics name the route template whichever path answered
    requests = fast.app.state.metrics.requests  # type: ignore[attr-defined]
    assert requests.labels("/objects", "POST", "202")._value.get() == 3
    assert requests.labels("/objects/{object_id}", "PATCH", "202")._value.get() == 2
    assert requests.labels("/objects/{object_id}", "DELETE", "202")._value.get() == 2
