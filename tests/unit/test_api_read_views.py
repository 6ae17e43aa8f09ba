"""GET /objects/{id} over views set exactly (no broker, no lifespan): documents stored before NaN and lone
surrogates were refused, and an outsider's answer byte-compared with the same id's answer when it is absent."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.callers.identity import dev_token
from app.api.main import create_app
from app.settings import Settings
from tests.unit.fake_read_model import FakeReadModel, View

pytestmark = pytest.mark.unit

SETTINGS = Settings()


def views() -> dict[str, View]:
    return {
        "shared": View({"t": 1}, 4, owner="alice", editors=("bob",), readers=("carol",)),
        "tomb": View({}, 6, deleted=True, owner="alice", readers=("carol",)),
        "nan-doc": View({"x": float("nan")}, 1, owner="alice"),  # stored before such documents were refused
        "surrogate-doc": View({"x": "\ud800"}, 1, owner="alice"),
        "quarantined": View({"t": 1}, 5, owner="alice", readers=("carol",), quarantined=True),
        "stale": View({"t": 1}, 3, owner="alice", readers=("carol",), stale=True),
        "stale-tomb": View({}, 7, deleted=True, owner="alice", readers=("carol",), stale=True),
    }


@pytest.fixture(scope="module")
def read_model() -> FakeReadModel:
    return FakeReadModel(views())


@pytest.fixture(scope="module")
def client(read_model: FakeReadModel) -> Iterator[TestClient]:
    """The app without its lifespan: reads need only the read model and the token check, not the broker."""
    yield TestClient(create_app(SETTINGS, read_model=read_model), raise_server_exceptions=True)


def auth(principal: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {dev_token(SETTINGS, principal, ttl_s=60)}"}


@pytest.mark.parametrize("object_id", ["shared", "tomb", "quarantined", "stale"])
@pytest.mark.parametrize("if_none_match", [None, '"4"', '"6"', "*"])
def test_an_outsider_gets_exactly_the_answer_for_the_same_id_absent(client: TestClient, read_model: FakeReadModel,
                                                                    object_id: str, if_none_match: str | None) -> None:
    """Byte for byte and header for header, with the very same id: only exact control of the view allows that."""
    h = auth("mallory")
    if if_none_match is not None:
        h["If-None-Match"] = if_none_match
    hidden = client.get(f"/objects/{object_id}", headers=h)
    view = read_model.views.pop(object_id)
    try:
        unknown = client.get(f"/objects/{object_id}", headers=h)
    finally:
        read_model.views[object_id] = view
    assert hidden.status_code == 404 and hidden.json()["code"] == "NOT_FOUND"
    assert hidden.content == unknown.content
    assert dict(hidden.headers) == dict(unknown.headers) and "etag" not in hidden.headers


def test_get_serves_only_rfc8259_json(client: TestClient) -> None:
    """A document stored before NaN or lone surrogates were refused is never served as invalid JSON (or a 500)."""
    for object_id in ("nan-doc", "surrogate-doc"):
        r = client.get(f"/objects/{object_id}", headers=auth("alice"))
        assert r.status_code == 503 and r.json()["code"] == "UNSERVABLE_DOCUMENT", r.text
        assert r.headers["content-type"].startswith("application/problem+json") and "retry-after" in r.headers
        hidden = client.get(f"/objects/{object_id}", headers=auth("mallory"))
        assert hidden.status_code == 404 and hidden.json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize(("object_id", "code"), [("quarantined", "DOCUMENT_QUARANTINED"), ("stale", "VIEW_STALE")])
@pytest.mark.parametrize("principal", ["alice", "carol"])
def test_a_view_known_stale_or_quarantined_fails_closed(client: TestClient, object_id: str, code: str,
                                                        principal: str) -> None:
    """Never served: the document (and for a stale view the roles) may miss events; 503 with a code instead."""
    r = client.get(f"/objects/{object_id}", headers=auth(principal))
    assert r.status_code == 503 and r.json()["code"] == code and "retry-after" in r.headers
    assert '"t"' not in r.text


def test_a_deletion_that_landed_after_a_gap_is_410() -> None:
    client = TestClient(create_app(SETTINGS, read_model=FakeReadModel(views())))
    r = client.get("/objects/stale-tomb", headers=auth("carol"))
    assert r.status_code == 410 and r.json()["code"] == "DELETED"
