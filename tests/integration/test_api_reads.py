"""Who may read: the owner, editors and readers of an object; anyone else gets exactly the 404 of an unknown id.
And reader grants: PUT / DELETE /objects/{id}/readers/{principal} become GrantReader / RevokeReader."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import NamedTuple

import psycopg
import pytest

from app.read_models import open_reader, open_writer
from app.settings import Settings
from app.topics import ensure_topics
from commands import GrantReader, RevokeReader
from projections.db import ObjectView
from projections.db.port import ReadModelReader
from tests.conftest import READ_MODELS, read_model_on
from tests.integration.test_api_support import (
    FakeReadModel,
    TestClient,
    api_client,
    auth,
    is_problem,
    produced_commands,
)

pytestmark = pytest.mark.integration

LEGACY = {"nan-doc": ObjectView({"x": float("nan")}, 1, owner="alice")}  # stored before such documents were refused


def views() -> dict[str, ObjectView]:
    return {
        "shared": ObjectView({"t": 1}, 4, owner="alice", editors=("bob",), readers=("carol",)),
        "tomb": ObjectView({}, 6, deleted=True, owner="alice", readers=("carol",)),
    }


@pytest.fixture(scope="module")
def module_settings(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tag = uuid.uuid4().hex[:10]
    s = base_settings.model_copy(update={
        "topic_commands": f"commands-{tag}", "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}",
        "var_dir": tmp_path_factory.mktemp("api-reads")})
    ensure_topics(s)
    return s


class Backend(NamedTuple):
    kind: str
    settings: Settings
    reader: ReadModelReader


@pytest.fixture(scope="module", params=READ_MODELS)
def backend(request: pytest.FixtureRequest, module_settings: Settings) -> Iterator[Backend]:
    """The real read model on each backend, written by the projection's own store, read by the API's reader."""
    with read_model_on(request.param, module_settings, request) as s:
        writer = open_writer(s)
        writer.write(views() | (LEGACY if request.param == "rocksdb" else {}), {}, {})
        writer.close()
        reader = open_reader(s)
        yield Backend(request.param, s, reader)
        reader.close()


@pytest.fixture(scope="module")
def client(backend: Backend) -> Iterator[TestClient]:
    with api_client(backend.settings, backend.reader) as c:
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
def test_an_outsider_gets_exactly_the_answer_for_an_unknown_id(client: TestClient, module_settings: Settings,
                                                               object_id: str, if_none_match: str | None) -> None:
    h = auth(module_settings, "mallory")
    if if_none_match is not None:
        h["If-None-Match"] = if_none_match
    hidden = client.get(f"/objects/{object_id}", headers=h)
    unknown = client.get(f"/objects/{object_id[:-1]}~", headers=h)  # an id of the same length, never created
    is_problem(hidden, 404, "NOT_FOUND")
    assert hidden.content == unknown.content.replace(f"{object_id[:-1]}~".encode(), object_id.encode())
    assert dict(hidden.headers) == dict(unknown.headers) and "etag" not in hidden.headers


def test_get_serves_only_rfc8259_json(client: TestClient, backend: Backend, module_settings: Settings) -> None:
    """A document stored before NaN was refused is never served as invalid JSON (or a 500); PostgreSQL's jsonb
    cannot hold one at all."""
    if backend.kind == "postgresql":
        writer = open_writer(backend.settings)
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            writer.write(LEGACY, {}, {})
            writer.close()  # the write runs in the background: its error comes out here at the latest
        is_problem(client.get("/objects/nan-doc", headers=auth(module_settings, "alice")), 404, "NOT_FOUND")
        return
    r = client.get("/objects/nan-doc", headers=auth(module_settings, "alice"))
    is_problem(r, 503, "UNSERVABLE_DOCUMENT")
    assert "retry-after" in r.headers
    is_problem(client.get("/objects/nan-doc", headers=auth(module_settings, "mallory")), 404, "NOT_FOUND")


def test_reader_routes_and_batch_kinds_produce_reader_commands(module_settings: Settings) -> None:
    with api_client(module_settings, FakeReadModel()) as client:  # writes only: once, whatever the read model
        _reader_commands(client, module_settings)


def _reader_commands(client: TestClient, module_settings: Settings) -> None:
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
