"""Prefer: wait end to end: the API in-process, the real validator query on the session's Spark, the real broker
(the shared running Arbiter: this test's objects, key and principals carry its tag)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.test_api_support import RunningArbiter, auth

pytestmark = pytest.mark.integration


def test_prefer_wait_returns_the_validators_decision(arbiter: RunningArbiter) -> None:
    s, client, t = arbiter.settings, arbiter.client, arbiter.tag
    e2e, e2e_b, nobody, key = f"e2e-{t}", f"e2e-b-{t}", f"nobody-made-this-{t}", f"e2e-create-{t}"
    with ThreadPoolExecutor(6) as pool:
        alice = {**auth(s, f"alice-{t}"), "Prefer": "wait=120"}
        bob_name = f"bob-{t}"
        bob = {**auth(s, bob_name), "Prefer": "wait=120"}

        def together(*calls):  # noqa: ANN002, ANN202 - independent commands share the validator's micro-batches
            return [f.result() for f in [pool.submit(getattr(client, m), *a, **kw) for m, a, kw in calls]]

        created, created_b, missing = together(
            ("post", ("/objects",), {"json": {"id": e2e, "document": {"a": 1}},
                                     "headers": {**alice, "Idempotency-Key": key}}),
            ("post", ("/objects",), {"json": {"id": e2e_b, "document": {}}, "headers": alice}),
            ("delete", (f"/objects/{nobody}",), {"headers": alice}))
        assert created.status_code == 201, created.text
        assert created.headers["etag"] == '"1"' and created.headers["location"] == f"/objects/{e2e}"
        assert created.json()["event"] == "CREATED" and created_b.status_code == 201
        assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"

        # none of the first four changes e2e, so their order within the partition does not matter
        retried, again, reused, outsider, granted = together(
            ("post", ("/objects",), {"json": {"id": e2e, "document": {"a": 1}},
                                     "headers": {**alice, "Idempotency-Key": key}}),
            ("post", ("/objects",), {"json": {"id": e2e, "document": {}}, "headers": alice}),
            ("post", ("/objects",), {"json": {"id": e2e, "document": {"a": 2}},
                                     "headers": {**alice, "Idempotency-Key": key}}),
            ("patch", (f"/objects/{e2e}",), {"json": {"a": 2}, "headers": bob}),
            ("put", (f"/objects/{e2e_b}/editors/{bob_name}",), {"headers": {**alice, "If-Match": '"1"'}}))
        assert retried.status_code == 201 and retried.headers["etag"] == '"1"'  # the original outcome
        assert again.status_code == 409 and again.json()["code"] == "ALREADY_EXISTS"
        assert reused.status_code == 422 and reused.json()["code"] == "IDEMPOTENCY_KEY_REUSED", reused.text
        # bob may not read e2e: told exactly what an unknown id gets
        assert outsider.status_code == 404 and outsider.json()["code"] == "NOT_FOUND"
        assert outsider.headers["etag"] == missing.headers["etag"] == '"0"'
        assert granted.status_code == 200 and granted.headers["etag"] == '"2"'

        updated, deleted, forbidden = together(
            ("patch", (f"/objects/{e2e_b}",), {"json": {"a": 2}, "headers": {**bob, "If-Match": '"2"'}}),
            ("delete", (f"/objects/{e2e}",), {"headers": alice}),
            ("delete", (f"/objects/{e2e_b}",), {"headers": bob}))  # an editor may not delete
        assert updated.status_code == 200 and updated.headers["etag"] == '"3"', updated.text
        assert deleted.status_code == 204 and deleted.headers["etag"] == '"2"' and not deleted.content
        assert forbidden.status_code == 403 and forbidden.json()["code"] == "FORBIDDEN"

        stale, after = together(
            ("patch", (f"/objects/{e2e_b}",), {"json": {"a": 3}, "headers": {**bob, "If-Match": '"2"'}}),
            ("patch", (f"/objects/{e2e}",), {"json": {"a": 4}, "headers": alice}))
        assert stale.status_code == 412 and stale.json()["code"] == "VERSION_CONFLICT"
        assert stale.headers["etag"] == '"3"' and stale.json()["current_version"] == 3
        assert after.status_code == 410 and after.json()["code"] == "DELETED"

        outcome = client.get(f"/commands/{key}", headers=alice).json()
        assert outcome["status"] == "accepted" and outcome["version"] == 1
        assert client.get(f"/commands/{key}", headers=bob).status_code == 404  # alice's key, not bob's
