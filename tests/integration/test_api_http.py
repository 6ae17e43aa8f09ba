"""HTTP behaviour on the live pipeline (real broker, the real validator on the session's Spark, the real DB
projection and read model): auth, bad input as problem+json, Prefer: wait, outcomes, reads, ops endpoints."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from app.api.callers.auth import OPERATE
from app.settings import Settings
from schemas import codec
from tests.conftest import READ_MODELS
from tests.integration.test_api_support import (
    TestClient,
    api_client,
    auth,
    consume_all,
    decided,
    is_problem,
    read_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def module_settings(shared_arbiter: tuple[Settings, TestClient]) -> Settings:
    """The shared running Arbiter's settings (its topics, validator, DB projection and read model) with this module's
    API limits: a 4 KiB body cap and a 60 s wait. Only the API is reconfigured, so it is the module's own."""
    s, _ = shared_arbiter
    return s.model_copy(update={"max_body_bytes": 4096, "wait_max_s": 60.0})


@pytest.fixture(scope="module")
def client(module_settings: Settings) -> Iterator[TestClient]:
    with api_client(module_settings) as c:
        yield c


@pytest.fixture(scope="module")
def t() -> str:
    """This module's tag: its object ids carry it, so they never meet another test's on the shared topics."""
    return uuid.uuid4().hex[:8]


def wait(settings: Settings, who: str, **extra: str) -> dict[str, str]:
    return {**auth(settings, who), "Prefer": "wait=60", **extra}


# --- authentication ------------------------------------------------------------------------------

def test_writes_without_a_valid_token_are_401_and_produce_nothing(client: TestClient, module_settings: Settings,
                                                                  t: str) -> None:
    body = {"id": f"sneaky-{t}", "document": {}}
    elsewhere = module_settings.path(module_settings.var_dir) / "another-issuer"  # another key pair, same iss
    forged = auth(module_settings.model_copy(update={"var_dir": elsewhere}), "alice")
    for headers in ({}, {"Authorization": "Bearer nonsense"}, {"Authorization": "Basic YWxpY2U6eA=="}, forged):
        r = client.post("/objects", json=body, headers=headers)
        is_problem(r, 401, "UNAUTHORIZED")
        assert r.headers["www-authenticate"].startswith("Bearer")
    is_problem(client.delete(f"/objects/x-{t}", headers=forged), 401)
    is_problem(client.post("/commands:batch", json={"commands": [{"kind": "delete", "object_id": f"x-{t}"}]}), 401)
    is_problem(client.get(f"/objects/live-{t}"), 401)
    records = consume_all(module_settings, module_settings.topic_commands, 1, timeout=1.5)
    assert not [m for m in records if m.key() in (f"sneaky-{t}".encode(), f"x-{t}".encode())]


def test_a_principal_in_the_body_never_becomes_the_principal(client: TestClient, module_settings: Settings,
                                                              t: str) -> None:
    h, p1 = auth(module_settings, "mallory"), f"p1-{t}"
    is_problem(client.post("/objects", json={"id": p1, "document": {}, "principal": "alice"}, headers=h),
               422, "INVALID_REQUEST")
    batch = {"commands": [{"kind": "delete", "object_id": p1, "principal": "alice"}]}
    is_problem(client.post("/commands:batch", json=batch, headers=h), 422)
    # inside a merge patch "principal" is just a document field; the command's principal is the token's
    r = client.patch(f"/objects/{p1}", json={"principal": "alice"}, headers={**h, "Idempotency-Key": f"patch-{p1}"})
    assert r.status_code == 202
    records = consume_all(module_settings, module_settings.topic_commands, 1)
    cmds = [codec.decode_command(m.value()) for m in records if m.key() == p1.encode()]
    assert [(c.command_id, c.principal) for c in cmds] == [(f"patch-{p1}", "mallory")]


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

def metric(client: TestClient, settings: Settings, sample: str) -> float:
    """The value of one /metrics sample (``name{labels}``), 0 if the app has not counted it yet."""
    for line in client.get("/metrics", headers=auth(settings, "operator")).text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_prefer_wait_answers_with_the_decision(client: TestClient, module_settings: Settings, t: str) -> None:
    """Each answer is the validator's decision of that very command, its status, ETag and current version."""
    s = module_settings
    samples = ['arbiter_api_outcomes_total{outcome="ACCEPTED"}', 'arbiter_api_outcomes_total{outcome="FORBIDDEN"}',
               'arbiter_api_requests_total{method="POST",route="/objects",status="201"}']
    before = [metric(client, s, m) for m in samples]
    ok = decided(client.post("/objects", json={"id": f"w-ok-{t}", "document": {}},
                             headers=wait(s, "alice", **{"Idempotency-Key": f"c-ok-{t}"})), 201, '"1"')
    assert ok.headers["location"] == f"/objects/w-ok-{t}"
    assert ok.json() == {"command_id": f"c-ok-{t}", "object_id": f"w-ok-{t}", "status": "accepted", "version": 1,
                         "event": "CREATED"}
    decided(client.put(f"/objects/w-ok-{t}/readers/bob", headers=wait(s, "alice")), 200, '"2"')
    decided(client.post("/objects", json={"id": f"w-del-{t}", "document": {}}, headers=wait(s, "alice")), 201, '"1"')
    gone = decided(client.delete(f"/objects/w-del-{t}", headers=wait(s, "alice")), 204, '"2"')
    assert not gone.content
    refused = [("patch", f"/objects/w-ok-{t}", {"json": {"x": 1}}, wait(s, "alice", **{"If-Match": '"1"'}),
                412, "VERSION_CONFLICT", 2),
               ("post", "/objects", {"json": {"id": f"w-ok-{t}", "document": {}}}, wait(s, "alice"), 409, "ALREADY_EXISTS", 2),
               ("patch", f"/objects/w-del-{t}", {"json": {"x": 1}}, wait(s, "alice"), 410, "DELETED", 2),
               ("patch", f"/objects/w-ok-{t}", {"json": {"x": 1}}, wait(s, "bob"), 403, "FORBIDDEN", 2),  # bob only reads
               # an outsider learns the id is taken, not its version nor whether it was deleted (issue 25)
               ("post", "/objects", {"json": {"id": f"w-ok-{t}", "document": {}}}, wait(s, "mallory"), 409, "ALREADY_EXISTS", 0),
               ("post", "/objects", {"json": {"id": f"w-del-{t}", "document": {}}}, wait(s, "mallory"), 409, "ALREADY_EXISTS",
                0)]
    for method, path, kw, headers, status, code, version in refused:
        r = getattr(client, method)(path, headers=headers, **kw)
        body = is_problem(r, status, code)
        assert body["current_version"] == version and r.headers["etag"] == f'"{version}"', body
        assert client.get(f"/commands/{body['command_id']}", headers=headers).json()["reason"] == code
    known = client.get(f"/commands/c-ok-{t}", headers=auth(s, "alice"))
    assert known.status_code == 200 and known.json()["status"] == "accepted" and known.headers["etag"] == '"1"'
    assert [metric(client, s, m) - b for m, b in zip(samples, before, strict=True)] == [4, 1, 2]
    assert "arbiter_api_produce_seconds_bucket" in client.get("/metrics", headers=auth(s, "operator")).text


def test_a_duplicate_answers_with_the_original_outcome(client: TestClient, module_settings: Settings, t: str) -> None:
    """A client's retry of an accepted update is the validator's DUPLICATE, answered as the original: 200, v2."""
    s = module_settings
    decided(client.post("/objects", json={"id": f"dup-{t}", "document": {}}, headers=wait(s, "alice")), 201, '"1"')
    retry = wait(s, "alice", **{"Idempotency-Key": f"retry-1-{t}"})
    first = decided(client.patch(f"/objects/dup-{t}", json={"a": 1}, headers=retry), 200, '"2"')
    again = decided(client.patch(f"/objects/dup-{t}", json={"a": 1}, headers=retry), 200, '"2"')
    assert first.json()["event"] == "UPDATED" and again.json()["event"] is None
    assert again.json()["version"] == 2 and again.json()["command_id"] == f"retry-1-{t}"
    read = read_until(client, f"/objects/dup-{t}", auth(s, "alice"), '"2"')
    assert read.json() == {"a": 1}  # applied once


# --- the read side ------------------------------------------------------------------------------------

def test_get_object_from_the_read_model(client: TestClient, module_settings: Settings, t: str) -> None:
    """What the validator accepted, the projection applied (a merge patch included) and the API serves by role."""
    s = module_settings
    decided(client.post("/objects", json={"id": f"live-{t}", "document": {"a": 1}}, headers=wait(s, "alice")), 201, '"1"')
    decided(client.put(f"/objects/live-{t}/readers/reader", headers=wait(s, "alice")), 200, '"2"')
    decided(client.patch(f"/objects/live-{t}", json={"ü": "ß"}, headers=wait(s, "alice")), 200, '"3"')
    decided(client.post("/objects", json={"id": f"gone-{t}", "document": {"b": 1}}, headers=wait(s, "alice")), 201, '"1"')
    decided(client.put(f"/objects/gone-{t}/readers/reader", headers=wait(s, "alice")), 200, '"2"')
    decided(client.delete(f"/objects/gone-{t}", headers=wait(s, "alice")), 204, '"3"')
    h = auth(s, "reader")
    r = read_until(client, f"/objects/live-{t}", h, '"3"')
    assert r.status_code == 200 and r.json() == {"a": 1, "ü": "ß"} and r.headers["etag"] == '"3"', r.text
    assert client.get(f"/objects/live-{t}", headers={**h, "If-None-Match": '"3"'}).status_code == 304
    assert client.get(f"/objects/live-{t}", headers={**h, "If-None-Match": '"2"'}).status_code == 200
    deleted = read_until(client, f"/objects/gone-{t}", h, '"3"')
    is_problem(deleted, 410, "DELETED")
    is_problem(client.get(f"/objects/never-{t}", headers=h), 404, "NOT_FOUND")
    outsider = auth(s, "mallory")
    hidden, unknown = client.get(f"/objects/live-{t}", headers=outsider), client.get(f"/objects/LIVE-{t.upper()}",
                                                                                         headers=outsider)
    live, unknown_id = f"live-{t}".encode(), f"LIVE-{t.upper()}".encode()
    assert hidden.content == unknown.content.replace(unknown_id, live) and "etag" not in hidden.headers
    is_problem(client.get(f"/objects/gone-{t}", headers=outsider), 404, "NOT_FOUND")


def test_ops_endpoints(client: TestClient) -> None:
    # healthz is 503 until this module's fresh API process's claims reader has caught up (app.api.writes.claims)
    deadline = time.monotonic() + 60
    while (health := client.get("/healthz")).status_code == 503 and time.monotonic() < deadline:
        assert health.json()["claims_reader"] is False and health.json()["broker"] is True, health.text
        time.sleep(0.2)
    # claims_lag is null until the claims reader's first fetch answered; claims_skipped counts what other tests on
    # the shared topics forged (tests/integration/test_api_key_claims.py)
    lag, skipped = health.json()["claims_lag"], health.json()["claims_skipped"]
    assert health.status_code == 200 and health.json() == {"ok": True, "broker": True, "read_model": True,
                                                           "outcomes_consumer": True, "outcomes_consumer_restarts": 0,
                                                           "outcomes_consumer_error": None, "claims_reader": True,
                                                           "claims_skipped": skipped, "claims_reader_error": None,
                                                           "claims_lag": lag} and lag in (None, 0)
    assert isinstance(skipped, int) and skipped >= 0
    spec = client.get("/openapi.json").json()
    assert "/commands:batch" in spec["paths"] and "Problem" in spec["components"]["schemas"]

def test_metrics_and_status_need_the_operate_scope(client: TestClient, module_settings: Settings) -> None:
    operator = auth(module_settings, "operator", (OPERATE,))
    for path in ("/metrics", "/status.json"):
        is_problem(client.get(path), 401, "UNAUTHORIZED")
        is_problem(client.get(path, headers=auth(module_settings, "alice")), 403, "INSUFFICIENT_SCOPE")
        assert client.get(path, headers=operator).status_code == 200, path
    metrics = client.get("/metrics", headers=operator)
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "arbiter_api_outcomes_cached_bytes" in metrics.text and "arbiter_api_waiters" in metrics.text
    assert client.get("/status.json", headers=operator).json()["broker"] == "up"
    page = client.get("/")  # the page itself is open; its script sends the token
    assert page.status_code == 200 and "Authorization" in client.get("/status.js").text




def test_health_tells_whether_the_projection_made_the_read_model(settings: Settings) -> None:
    """Before the DB projection first ran there is nothing to read (healthz says so); after, there is."""
    from app.read_models import open_writer
    from projections.db import DbProjection

    with api_client(settings) as client:
        client.app.state.read_model_probe.interval = 0  # type: ignore[attr-defined]  # each call probes (no memo)
        assert client.get("/healthz").json()["read_model"] is False
        is_problem(client.get("/objects/doc", headers=auth(settings, "alice")), 404, "NOT_FOUND")
        DbProjection(open_writer(settings.model_copy(update={"projection_sync_writes": False}))).close()
        assert client.get("/healthz").json()["read_model"] is True


@pytest.mark.parametrize("read_model_settings", READ_MODELS, indirect=True)
def test_get_object_through_the_real_read_model(read_model_settings: Settings) -> None:
    """The projection's own store writes; the API reads through the configured backend's reader (a RocksDB
    secondary, or a PostgreSQL pool), opened before the projection created anything."""
    from app.read_models import open_writer
    from projections.db import ObjectView

    settings = read_model_settings
    with api_client(settings) as client:
        client.app.state.read_model_probe.interval = 0  # type: ignore[attr-defined]  # each call probes (no memo)
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
