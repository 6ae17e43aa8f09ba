"""HTTP behaviour against the real broker: auth, bad input as problem+json, Prefer: wait, outcomes, reads."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from app.settings import Settings
from app.topics import ensure_topics
from commands import Event, EventType, ReasonCode, Rejection
from commands.ids import event_id
from schemas import codec
from tests.conftest import READ_MODELS
from tests.integration.test_api_support import (
    FakeReadModel,
    TestClient,
    View,
    api_client,
    auth,
    consume_all,
    is_problem,
    produce_outcome,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_settings(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tag = uuid.uuid4().hex[:10]
    s = base_settings.model_copy(update={
        "topic_commands": f"commands-{tag}", "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}",
        "var_dir": tmp_path_factory.mktemp("api-http"), "max_body_bytes": 4096, "wait_max_s": 10.0})
    ensure_topics(s)
    return s


@pytest.fixture(scope="module")
def read_model() -> FakeReadModel:
    return FakeReadModel({"live": View({"a": 1, "ü": "ß"}, 3, readers=("reader",)),
                          "gone": View({}, 5, deleted=True, readers=("reader",))})


@pytest.fixture(scope="module")
def client(module_settings: Settings, read_model: FakeReadModel) -> Iterator[TestClient]:
    with api_client(module_settings, read_model) as c:
        yield c


# --- authentication ------------------------------------------------------------------------------

def test_writes_without_a_valid_token_are_401_and_produce_nothing(client: TestClient, module_settings: Settings) -> None:
    body = {"id": "sneaky", "document": {}}
    forged = auth(module_settings.model_copy(update={"auth_secret": SecretStr("not-the-secret")}), "alice")
    for headers in ({}, {"Authorization": "Bearer nonsense"}, {"Authorization": "Basic YWxpY2U6eA=="}, forged):
        r = client.post("/objects", json=body, headers=headers)
        is_problem(r, 401, "UNAUTHORIZED")
        assert r.headers["www-authenticate"].startswith("Bearer")
    is_problem(client.delete("/objects/x", headers=forged), 401)
    is_problem(client.post("/commands:batch", json={"commands": [{"kind": "delete", "object_id": "x"}]}), 401)
    is_problem(client.get("/objects/live"), 401)
    records = consume_all(module_settings, module_settings.topic_commands, 1, timeout=1.5)
    assert not [m for m in records if m.key() in (b"sneaky", b"x")]


def test_a_principal_in_the_body_never_becomes_the_principal(client: TestClient, module_settings: Settings) -> None:
    h = auth(module_settings, "mallory")
    is_problem(client.post("/objects", json={"id": "p1", "document": {}, "principal": "alice"}, headers=h),
               422, "INVALID_REQUEST")
    batch = {"commands": [{"kind": "delete", "object_id": "p1", "principal": "alice"}]}
    is_problem(client.post("/commands:batch", json=batch, headers=h), 422)
    # inside a merge patch "principal" is just a document field; the command's principal is the token's
    r = client.patch("/objects/p1", json={"principal": "alice"}, headers={**h, "Idempotency-Key": "patch-p1"})
    assert r.status_code == 202
    records = consume_all(module_settings, module_settings.topic_commands, 1)
    cmds = [codec.decode_command(m.value()) for m in records if m.key() == b"p1"]
    assert [(c.command_id, c.principal) for c in cmds] == [("patch-p1", "mallory")]


# --- bad input -------------------------------------------------------------------------------------

def test_bad_input_is_4xx_problem_json(client: TestClient, module_settings: Settings) -> None:
    h = {**auth(module_settings), "Content-Type": "application/json"}
    is_problem(client.post("/objects", content=b'{"document": {', headers=h), 400, "INVALID_JSON")
    is_problem(client.post("/objects", json={"document": [1, 2]}, headers=h), 422, "INVALID_REQUEST")
    is_problem(client.post("/objects", json={"document": {}, "colour": "red"}, headers=h), 422)
    is_problem(client.post("/objects", json={"id": "bad id/..", "document": {}}, headers=h), 422)
    is_problem(client.patch("/objects/x", json=[1], headers=h), 422)
    is_problem(client.patch("/objects/x", json={}, headers={**h, "If-Match": "W/\"1\""}), 422)
    is_problem(client.post("/commands:batch", json={"commands": []}, headers=h), 422)
    is_problem(client.post("/commands:batch", json={"commands": [{"kind": "explode", "object_id": "x"}]}, headers=h), 422)
    big = json.dumps({"document": {"x": "y" * 5000}}).encode()
    is_problem(client.post("/objects", content=big, headers=h), 413, "BODY_TOO_LARGE")
    chunked = client.post("/objects", content=iter([big[:3000], big[3000:]]), headers=h)  # no Content-Length
    is_problem(chunked, 413, "BODY_TOO_LARGE")
    is_problem(client.get("/nowhere"), 404, "ROUTE_NOT_FOUND")
    is_problem(client.put("/objects", headers=h), 405, "METHOD_NOT_ALLOWED")


# --- Prefer: wait and GET /commands --------------------------------------------------------------------

def _event(cmd_id: str, object_id: str, version: int, typ: EventType, at: datetime) -> Event:
    return Event(event_id(object_id, version), typ, object_id, version, cmd_id, "alice", at, "alice",
                 document="{}" if typ is EventType.CREATED else None)


def _decide_later(settings: Settings, client: TestClient, make_outcome) -> None:  # noqa: ANN001
    """Play the validator: read the command the API produced and write ``make_outcome(command)``."""
    import threading

    def run() -> None:
        records = consume_all(settings, settings.topic_commands, 1, timeout=10)
        for m in records:
            cmd = codec.decode_command(m.value())
            outcome = make_outcome(cmd)
            if outcome is not None:
                produce_outcome(settings, outcome)

    threading.Thread(target=run, daemon=True).start()


def test_prefer_wait_answers_with_the_decision(settings: Settings) -> None:
    def decide(cmd):  # noqa: ANN001, ANN202
        if cmd.object_id == "w-ok":
            return _event(cmd.command_id, cmd.object_id, 1, EventType.CREATED, cmd.issued_at)
        if cmd.object_id == "w-del":
            return _event(cmd.command_id, cmd.object_id, 4, EventType.DELETED, cmd.issued_at)
        reason = {"w-412": ReasonCode.VERSION_CONFLICT, "w-409": ReasonCode.ALREADY_EXISTS,
                  "w-410": ReasonCode.DELETED, "w-403": ReasonCode.FORBIDDEN}.get(cmd.object_id)
        if reason is None:
            return None
        return Rejection(f"r-{cmd.command_id}", reason, f"{reason} says the test", cmd.command_id, cmd.object_id,
                         cmd.principal, cmd.issued_at, 7)

    with api_client(settings) as client:
        h = {**auth(settings), "Prefer": "wait=10"}
        _decide_later(settings, client, decide)
        ok = client.post("/objects", json={"id": "w-ok", "document": {}}, headers={**h, "Idempotency-Key": "c-ok"})
        assert ok.status_code == 201, ok.text
        assert ok.headers["etag"] == '"1"' and ok.headers["location"] == "/objects/w-ok"
        assert ok.json() == {"command_id": "c-ok", "object_id": "w-ok", "status": "accepted", "version": 1,
                             "event": "CREATED"}
        _decide_later(settings, client, decide)
        gone = client.delete("/objects/w-del", headers=h)
        assert gone.status_code == 204 and gone.headers["etag"] == '"4"' and not gone.content
        for oid, status, code, extra in [("w-412", 412, "VERSION_CONFLICT", {"If-Match": '"3"'}),
                                         ("w-409", 409, "ALREADY_EXISTS", {}), ("w-410", 410, "DELETED", {}),
                                         ("w-403", 403, "FORBIDDEN", {})]:
            _decide_later(settings, client, decide)
            r = client.post("/objects", json={"id": oid, "document": {}}, headers={**h, **extra})
            body = is_problem(r, status, code)
            assert body["current_version"] == 7 and r.headers["etag"] == '"7"'
            assert client.get(f"/commands/{body['command_id']}", headers=h).json()["reason"] == code
        # nobody decides this one: a short wait times out into the usual 202
        quiet = client.post("/objects", json={"id": "w-none", "document": {}}, headers={**h, "Prefer": "wait=0.3"})
        assert quiet.status_code == 202
        is_problem(client.get(f"/commands/{quiet.json()['command_id']}", headers=h), 404, "NOT_FOUND")
        known = client.get("/commands/c-ok", headers=h)
        assert known.status_code == 200 and known.json()["status"] == "accepted" and known.headers["etag"] == '"1"'
        metrics = client.get("/metrics", headers=auth(settings, "operator")).text
    assert 'arbiter_api_outcomes_total{outcome="ACCEPTED"}' in metrics
    assert 'arbiter_api_outcomes_total{outcome="FORBIDDEN"} 1.0' in metrics
    assert 'arbiter_api_requests_total{method="POST",route="/objects",status="201"} 1.0' in metrics
    assert "arbiter_api_produce_seconds_bucket" in metrics


def test_a_duplicate_answers_with_the_original_outcome(settings: Settings) -> None:
    at = datetime.now(UTC)
    produce_outcome(settings, _event("first-try", "dup", 1, EventType.CREATED, at))
    with api_client(settings) as client:
        h = {**auth(settings), "Prefer": "wait=10", "Idempotency-Key": "retry-1"}
        _decide_later(settings, client, lambda cmd: Rejection(
            "r", ReasonCode.DUPLICATE, "seen", cmd.command_id, cmd.object_id, cmd.principal, cmd.issued_at, 2,
            original_outcome="ACCEPTED", original_version=1))
        r = client.patch("/objects/dup", json={"a": 1}, headers=h)
    assert r.status_code == 200 and r.headers["etag"] == '"1"', r.text
    assert r.json()["version"] == 1


# --- the read side ------------------------------------------------------------------------------------

def test_get_object_from_the_read_model(client: TestClient, module_settings: Settings) -> None:
    h = auth(module_settings, "reader")
    r = client.get("/objects/live", headers=h)
    assert r.status_code == 200 and r.json() == {"a": 1, "ü": "ß"} and r.headers["etag"] == '"3"'
    assert client.get("/objects/live", headers={**h, "If-None-Match": '"3"'}).status_code == 304
    assert is_problem(client.get("/objects/gone", headers=h), 410, "DELETED")
    is_problem(client.get("/objects/never", headers=h), 404, "NOT_FOUND")


def test_ops_endpoints(client: TestClient) -> None:
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json() == {"ok": True, "broker": True, "read_model": True,
                                                           "outcomes_consumer": True}
    spec = client.get("/openapi.json").json()
    assert "/commands:batch" in spec["paths"] and "Problem" in spec["components"]["schemas"]

def test_metrics_and_status_are_for_operators_only(client: TestClient, module_settings: Settings) -> None:
    for path in ("/metrics", "/status.json"):
        is_problem(client.get(path), 401, "UNAUTHORIZED")
        is_problem(client.get(path, headers=auth(module_settings, "alice")), 403, "FORBIDDEN")
        assert client.get(path, headers=auth(module_settings, "operator")).status_code == 200, path
    metrics = client.get("/metrics", headers=auth(module_settings, "operator"))
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "arbiter_api_outcomes_cached_bytes" in metrics.text and "arbiter_api_waiters" in metrics.text
    assert client.get("/status.json", headers=auth(module_settings, "operator")).json()["broker"] == "up"
    page = client.get("/")  # the page itself is open; its script sends the token
    assert page.status_code == 200 and "Authorization" in client.get("/status.js").text


@pytest.mark.parametrize("read_model_settings", READ_MODELS, indirect=True)
def test_get_object_through_the_real_read_model(read_model_settings: Settings) -> None:
    """The projection's own store writes; the API reads through the configured backend's reader (a RocksDB
    secondary, or a PostgreSQL pool), opened before the projection created anything."""
    from app.read_models import open_writer
    from projections.db import ObjectView

    settings = read_model_settings
    with api_client(settings) as client:
        assert client.get("/healthz").json()["read_model"] is False  # the projection has not created it yet
        h = auth(settings, "reader")
        is_problem(client.get("/objects/doc", headers=h), 404, "NOT_FOUND")
        store = open_writer(settings)
        try:
            store.write({"doc": ObjectView({"title": "hello"}, 2, owner="alice", readers=("reader",)),
                         "old": ObjectView({}, 4, deleted=True, owner="alice", editors=("reader",))}, {}, {})
            deadline = time.monotonic() + 10
            while (r := client.get("/objects/doc", headers=h)).status_code == 404 and time.monotonic() < deadline:
                time.sleep(0.1)  # the secondary catches up within its refresh interval
            assert r.status_code == 200 and r.json() == {"title": "hello"} and r.headers["etag"] == '"2"'
            is_problem(client.get("/objects/old", headers=h), 410, "DELETED")
            outsider = auth(settings, "mallory")
            hidden, unknown = client.get("/objects/doc", headers=outsider), client.get("/objects/dox", headers=outsider)
            is_problem(hidden, 404, "NOT_FOUND")
            assert hidden.content == unknown.content.replace(b"dox", b"doc") and "etag" not in hidden.headers
            is_problem(client.get("/objects/old", headers=outsider), 404, "NOT_FOUND")
            assert client.get("/healthz").json()["read_model"] is True
        finally:
            store.close()
