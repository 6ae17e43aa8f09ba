"""Who may read: the owner, editors and readers of an object; anyone else gets exactly the 404 of an unknown id.
And reader grants: PUT / DELETE /objects/{id}/readers/{principal} become GrantReader / RevokeReader."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from app.settings import Settings
from app.topics import ensure_topics
from commands import GrantReader, RevokeReader
from tests.integration.test_api_support import (
    FakeReadModel,
    TestClient,
    View,
    api_client,
    auth,
    is_problem,
    produced_commands,
)

pytestmark = pytest.mark.integration


def views() -> dict[str, View]:
    return {
        "shared": View({"t": 1}, 4, owner="alice", editors=("bob",), readers=("carol",)),
        "tomb": View({}, 6, deleted=True, owner="alice", readers=("carol",)),
        "nan-doc": View({"x": float("nan")}, 1, owner="alice"),  # stored before such documents were refused
        "surrogate-doc": View({"x": "\ud800"}, 1, owner="alice"),
    }


@pytest.fixture(scope="module")
def module_settings(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tag = uuid.uuid4().hex[:10]
    s = base_settings.model_copy(update={
        "topic_commands": f"commands-{tag}", "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}",
        "var_dir": tmp_path_factory.mktemp("api-reads")})
    ensure_topics(s)
    return s


@pytest.fixture(scope="module")
def read_model() -> FakeReadModel:
    return FakeReadModel(views())


@pytest.fixture(scope="module")
def client(module_settings: Settings, read_model: FakeReadModel) -> Iterator[TestClient]:
    with api_client(module_settings, read_model) as c:
        yield c


def test_owner_editors_and_readers_read(client: TestClient, module_settings: Settings) -> None:
    for who in ("alice", "bob", "carol"):
        h = auth(module_settings, who)
        r = client.get("/objects/shared", headers=h)
        assert r.status_code == 200 and r.json() == {"t": 1} and r.headers["etag"] == '"4"', who
        assert client.get("/objects/shared", headers={**h, "If-None-Match": '"4"'}).status_code == 304
        gone = is_problem(client.get("/objects/tomb", headers=h), 410 if who != "bob" else 404)
        assert gone["code"] == ("DELETED" if who != "bob" else "NOT_FOUND")


@pytest.mark.parametrize("object_id", ["shared", "tomb"])
@pytest.mark.parametrize("if_none_match", [None, '"4"', '"6"', "*"])
def test_an_outsider_gets_exactly_the_answer_for_an_unknown_id(client: TestClient, read_model: FakeReadModel,
                                                               module_settings: Settings, object_id: str,
                                                               if_none_match: str | None) -> None:
    h = auth(module_settings, "mallory")
    if if_none_match is not None:
        h["If-None-Match"] = if_none_match
    hidden = client.get(f"/objects/{object_id}", headers=h)
    view = read_model.views.pop(object_id)
    try:
        unknown = client.get(f"/objects/{object_id}", headers=h)
    finally:
        read_model.views[object_id] = view
    is_problem(hidden, 404, "NOT_FOUND")
    assert hidden.content == unknown.content
    assert dict(hidden.headers) == dict(unknown.headers) and "etag" not in hidden.headers


def test_get_serves_only_rfc8259_json(client: TestClient, module_settings: Settings) -> None:
    """A document stored before NaN or lone surrogates were refused is never served as invalid JSON (or a 500)."""
    for object_id in ("nan-doc", "surrogate-doc"):
        r = client.get(f"/objects/{object_id}", headers=auth(module_settings, "alice"))
        is_problem(r, 503, "UNSERVABLE_DOCUMENT")
        assert "retry-after" in r.headers
        is_problem(client.get(f"/objects/{object_id}", headers=auth(module_settings, "mallory")), 404, "NOT_FOUND")


def test_reader_routes_and_batch_kinds_produce_reader_commands(client: TestClient, module_settings: Settings) -> None:
    h = auth(module_settings, "alice")
    assert client.put("/objects/rd-1/readers/carol", headers={**h, "Idempotency-Key": "g1"}).status_code == 202
    assert client.delete("/objects/rd-1/readers/carol", headers={**h, "Idempotency-Key": "r1",
                                                                 "If-Match": '"2"'}).status_code == 202
    batch = {"commands": [{"kind": "grant_reader", "object_id": "rd-2", "reader": "dave", "idempotency_key": "g2"},
                          {"kind": "revoke_reader", "object_id": "rd-2", "reader": "dave"}]}
    assert client.post("/commands:batch", json=batch, headers=h).status_code == 202
    is_problem(client.put("/objects/rd-1/readers/not%20a%20name", headers=h), 422, "INVALID_REQUEST")
    cmds = sorted((c for c in produced_commands(module_settings, 4) if c.object_id in ("rd-1", "rd-2")),
                  key=lambda c: c.object_id)  # stable: one object's commands keep their (partition) order
    assert [(type(c), c.object_id, c.reader, c.principal) for c in cmds] == [
        (GrantReader, "rd-1", "carol", "alice"), (RevokeReader, "rd-1", "carol", "alice"),
        (GrantReader, "rd-2", "dave", "alice"), (RevokeReader, "rd-2", "dave", "alice")]
    assert cmds[0].command_id == "g1" and cmds[1].expected_version == 2 and cmds[2].command_id == "g2"
