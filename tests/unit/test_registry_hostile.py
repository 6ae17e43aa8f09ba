"""The open ``/registry`` answers what anyone may send with the registry's own 4xx, never a 500 (issue 35, item 8):
a schema nested deeper than JSON parses, a version that ``str.isdigit`` admits but ``int`` refuses, digit strings
past any version id (the app in-process, no broker)."""

from __future__ import annotations

import json
import warnings

import pytest

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    from starlette.exceptions import StarletteDeprecationWarning

    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.main import create_app
from app.api.routes.registry import MAX_VERSION
from app.settings import Settings

pytestmark = pytest.mark.unit

SUBJECT = "arbiter.Event"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()), raise_server_exceptions=False)


def test_a_schema_nested_deeper_than_json_parses_is_an_invalid_schema(client: TestClient) -> None:
    assert client.get(f"/registry/subjects/{SUBJECT}/versions").status_code == 200
    for depth in (10, 100_000):
        nested = "[" * depth + "]" * depth
        r = client.post(f"/registry/subjects/{SUBJECT}", content=json.dumps({"schema": nested}))
        assert r.status_code == (404 if depth == 10 else 422), (depth, r.text)  # parsed, not found / not parsed
        assert r.json()["error_code"] == (40403 if depth == 10 else 42201)


@pytest.mark.parametrize(("version", "status", "code"), [
    ("1", 200, None), (str(MAX_VERSION), 404, 40402), (str(MAX_VERSION + 1), 422, 42202), ("0", 404, 40402),
    ("\u00b2", 422, 42202), ("\u0661", 422, 42202), pytest.param("9" * 5000, 422, 42202, id="5000-digits"),
    ("1" * 11, 422, 42202),
    ("latest", 200, None), ("-2", 422, 42202), ("x", 422, 42202)])
def test_versions_are_ascii_digits_up_to_the_largest_version_id(client: TestClient, version: str, status: int,
                                                                code: int | None) -> None:
    r = client.get(f"/registry/subjects/{SUBJECT}/versions/{version}")
    assert r.status_code == status, r.text
    if code is not None:
        assert r.json()["error_code"] == code and len(r.text) < 300


def test_a_schema_id_of_5000_digits_is_refused_not_a_500(client: TestClient) -> None:
    assert client.get("/registry/schemas/ids/" + "9" * 5000).status_code < 500
