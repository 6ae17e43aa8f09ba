"""Gate integrity on the write side (issue 13), on the live pipeline (real broker, the real validator query, the
real DB projection): idempotency keys belong to their principal, bodies are RFC 8259 JSON, waiters are capped,
no slash redirects."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest

from app.api.writes.submit import new_object_id
from app.settings import Settings
from commands.json_text import DEFAULT_MAX_DEPTH
from tests.integration.test_api_support import (
    RunningArbiter,
    TestClient,
    api_client,
    auth,
    consume_all,
    is_problem,
    produced_commands,
)

pytestmark = pytest.mark.integration

WAIT = {"Prefer": "wait=60"}


@pytest.fixture
def module_settings(arbiter: RunningArbiter) -> Settings:
    return arbiter.settings  # the shared running Arbiter's: every object id and key here is the test's own


@pytest.fixture
def client(arbiter: RunningArbiter) -> TestClient:
    return arbiter.client


def h(settings: Settings, who: str, key: str | None = None, **extra: str) -> dict[str, str]:
    return {**auth(settings, who), **WAIT, **({"Idempotency-Key": key} if key else {}), **extra}


# --- idempotency keys are the principal's ---------------------------------------------------------------

def test_a_create_without_an_id_is_retried_onto_the_same_object(client: TestClient, module_settings: Settings) -> None:
    key = f"create-{uuid.uuid4().hex[:8]}"
    first = client.post("/objects", json={"document": {"n": 1}}, headers=h(module_settings, "alice", key))
    retry = client.post("/objects", json={"document": {"n": 1}}, headers=h(module_settings, "alice", key))
    assert first.status_code == 201, first.text
    assert retry.status_code == 201 and retry.json()["event"] is None, retry.text  # DUPLICATE -> the original
    assert first.headers["location"] == retry.headers["location"] == f"/objects/{new_object_id('alice', key)}"
    assert retry.headers["etag"] == '"1"'
    other = client.post("/objects", json={"document": {"n": 1}}, headers=h(module_settings, "bob", key))
    assert other.status_code == 201 and other.headers["location"] == f"/objects/{new_object_id('bob', key)}"
    assert other.headers["location"] != first.headers["location"]


def test_a_key_reused_for_another_request_is_422(client: TestClient, module_settings: Settings) -> None:
    oid, key = f"reuse-{uuid.uuid4().hex[:8]}", f"k-{uuid.uuid4().hex[:8]}"
    assert client.post("/objects", json={"id": oid, "document": {}}, headers=h(module_settings, "alice")).status_code == 201
    first = client.patch(f"/objects/{oid}", json={"a": 1}, headers=h(module_settings, "alice", key))
    assert first.status_code == 200 and first.headers["etag"] == '"2"', first.text
    again = client.patch(f"/objects/{oid}", json={"a": 1}, headers=h(module_settings, "alice", key))
    assert again.status_code == 200 and again.headers["etag"] == '"2"'  # a retry: the original outcome
    other = client.patch(f"/objects/{oid}", json={"a": 2}, headers=h(module_settings, "alice", key))
    body = is_problem(other, 422, "IDEMPOTENCY_KEY_REUSED")
    assert body["command_id"] == key
    # the key still names the accepted command
    outcome = client.get(f"/commands/{key}", headers=auth(module_settings, "alice")).json()
    assert (outcome["status"], outcome["version"]) == ("accepted", 2)


def test_outcomes_answer_only_their_principal(client: TestClient, module_settings: Settings) -> None:
    key = f"mine-{uuid.uuid4().hex[:8]}"
    before = client.get(f"/commands/{key}", headers=auth(module_settings, "alice"))
    is_problem(before, 404, "NOT_FOUND")
    made = client.post("/objects", json={"document": {}}, headers=h(module_settings, "alice", key))
    assert made.status_code == 201
    mine = client.get(f"/commands/{key}", headers=auth(module_settings, "alice"))
    assert mine.status_code == 200 and mine.json()["status"] == "accepted"
    theirs = client.get(f"/commands/{key}", headers=auth(module_settings, "mallory"))
    assert (theirs.status_code, theirs.content, dict(theirs.headers)) == \
        (before.status_code, before.content, dict(before.headers))


def test_an_outsider_cannot_tell_an_object_exists(client: TestClient, module_settings: Settings) -> None:
    oid = f"private-{uuid.uuid4().hex[:8]}"
    assert client.post("/objects", json={"id": oid, "document": {}}, headers=h(module_settings, "alice")).status_code == 201
    hidden = client.patch(f"/objects/{oid}", json={"x": 1}, headers=h(module_settings, "mallory", f"{oid}-m1"))
    unknown = client.patch(f"/objects/{oid}-none", json={"x": 1}, headers=h(module_settings, "mallory", f"{oid}-m2"))
    a, b = is_problem(hidden, 404, "NOT_FOUND"), is_problem(unknown, 404, "NOT_FOUND")
    assert hidden.headers["etag"] == unknown.headers["etag"] == '"0"'
    assert a["detail"] == b["detail"].replace(f"{oid}-none", oid)


# --- honest JSON ---------------------------------------------------------------------------------------

def nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


BAD_VALUES = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "1e400": "1e400", "surrogate": '"\\ud800"',
              "surrogate-inside": '"x\\udfffy"', "surrogate-in-list": '["\\udbff"]', "depth-33": nested(DEFAULT_MAX_DEPTH),
              "depth-50000": "[" * 50_000 + "]" * 50_000,
              # valid JSON, but PostgreSQL's jsonb cannot hold U+0000: refused so no backend is ever asked to
              "u0000": '"a\\u0000b"', "u0000-in-key": '{"k\\u0000": 1}'}


def _bodies(value: str, oid: str) -> list[tuple[str, str, str, str]]:
    """(method, path, content type, body) with ``value`` inside each kind of document or patch about ``oid``."""
    return [
        ("POST", "/objects", "application/json", f'{{"id": "{oid}", "document": {{"v": {value}}}}}'),
        ("PATCH", f"/objects/{oid}", "application/merge-patch+json", f'{{"v": {value}}}'),
        ("PATCH", f"/objects/{oid}", "application/json", f'{{"\\ud800": 1, "v": {value}}}'),
        ("POST", "/commands:batch", "application/json",
         f'{{"commands": [{{"kind": "update", "object_id": "{oid}", "patch": {{"v": {value}}}}}]}}'),
        ("POST", "/commands:batch", "application/json",
         f'{{"commands": [{{"kind": "create", "object_id": "{oid}", "document": {{"v": {value}}}}}]}}'),
    ]


@pytest.mark.parametrize("value", list(BAD_VALUES.values()), ids=list(BAD_VALUES))
def test_bodies_that_are_not_rfc8259_are_422_and_produce_nothing(client: TestClient, module_settings: Settings,
                                                                  value: str) -> None:
    oid = f"bad-{uuid.uuid4().hex[:8]}"
    for method, path, ctype, body in _bodies(value, oid):
        r = client.request(method, path, content=body.encode(), headers={**auth(module_settings, "alice"),
                                                                          "Content-Type": ctype})
        problem = is_problem(r, 422, "INVALID_REQUEST")
        json.dumps(problem, allow_nan=False).encode("utf-8")
    assert oid not in {c.object_id for c in produced_commands(module_settings, 0, timeout=1.0)}


def test_the_deepest_document_allowed_is_the_validators(client: TestClient, module_settings: Settings) -> None:
    oid = f"deep-{uuid.uuid4().hex[:8]}"
    ok = nested(DEFAULT_MAX_DEPTH - 1)  # {"v": ...} adds a level
    r = client.post("/objects", content=f'{{"id": "{oid}", "document": {{"v": {ok}}}}}'.encode(),
                    headers={**h(module_settings, "alice"), "Content-Type": "application/json"})
    assert r.status_code == 201, r.text  # accepted by the validator's own rule, too


def test_an_empty_id_is_a_problem_not_a_redirect(client: TestClient, module_settings: Settings) -> None:
    a = auth(module_settings, "alice")
    for method in ("GET", "PATCH", "DELETE", "POST"):
        r = client.request(method, "/objects/", headers=a, json={}, follow_redirects=False)
        assert 400 <= r.status_code < 500 and r.status_code not in (301, 302, 307, 308), (method, r.status_code)
        is_problem(r, r.status_code)
    is_problem(client.get("/commands/", headers=a, follow_redirects=False), 404)


# --- waiters are capped ----------------------------------------------------------------------------------

def test_waiters_beyond_the_cap_are_503_and_nothing_is_produced(settings: Settings) -> None:
    s = settings.model_copy(update={"max_waiters": 1, "retry_after_s": 4})
    with api_client(s) as client:  # and no validator: a waiter waits its whole wait
        results: dict[str, Any] = {}

        def hold() -> None:
            results["held"] = client.post("/objects", json={"id": "held", "document": {}},
                                          headers={**auth(s, "alice"), "Prefer": "wait=3"})

        holder = threading.Thread(target=hold)
        holder.start()
        deadline = time.monotonic() + 10
        while client.app.state.outcomes.waiting < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        refused = client.post("/objects", json={"id": "refused", "document": {}},
                              headers={**auth(s, "bob"), "Prefer": "wait=3"})
        body = is_problem(refused, 503, "TOO_MANY_WAITERS")
        assert refused.headers["retry-after"] == "4" and body["command_id"]
        no_wait = client.post("/objects", json={"id": "no-wait", "document": {}}, headers=auth(s, "bob"))
        assert no_wait.status_code == 202  # a write that does not wait needs no slot
        holder.join(10)
        assert results["held"].status_code == 202  # nobody decided it within its wait: the usual 202
        held = client.get(f"/commands/{results['held'].json()['command_id']}", headers=auth(s, "alice"))
        is_problem(held, 404, "NOT_FOUND")  # and no outcome is known for it
        after = client.post("/objects", json={"id": "after", "document": {}}, headers={**auth(s, "bob"), "Prefer": "wait=0.1"})
        assert after.status_code == 202  # the slot was given back
        metrics = client.get("/metrics", headers=auth(s, "operator")).text
    assert 'arbiter_api_waits_total{result="refused"} 1.0' in metrics
    keys = {m.key() for m in consume_all(s, s.topic_commands, 3)}
    assert keys == {b"held", b"no-wait", b"after"}


# --- the size chain: the largest document the validator accepts, and one byte more --------------------------

def test_a_document_over_the_size_chain_is_413_and_not_stored(client: TestClient, module_settings: Settings) -> None:
    from app.limits import for_settings

    largest = for_settings(module_settings).max_document_bytes
    pad = largest - len('{"p":""}')
    at_limit = client.post("/objects", json={"id": f"big-{uuid.uuid4().hex[:8]}", "document": {"p": "x" * pad}},
                           headers=auth(module_settings, "alice"))
    assert at_limit.status_code == 202, at_limit.text
    oid = f"big-{uuid.uuid4().hex[:8]}"
    over = client.post("/objects", json={"id": oid, "document": {"p": "x" * (pad + 1)}},
                       headers=auth(module_settings, "alice"))
    assert is_problem(over, 413, "TOO_LARGE")
    assert oid not in {c.object_id for c in produced_commands(module_settings, 1, timeout=3.0)}
