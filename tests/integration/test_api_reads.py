"""Who may read: the owner, editors and readers of an object; anyone else gets the 404 of an unknown id. Objects
are made through the API, decided by the real validator and projected by the real DB projection, on each read-model
backend.
And reader grants: PUT / DELETE /objects/{id}/readers/{principal} become GrantReader / RevokeReader."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.settings import Settings
from app.signing import SIGNATURE_HEADER, signer_for
from commands import GrantReader, RevokeReader
from tests.conftest import READ_MODELS, read_model_on
from tests.integration.test_api_support import (
    TestClient,
    api_client,
    audit_projection_running,
    auth,
    consume_all,
    decided,
    is_problem,
    live_pipeline,
    module_settings_for,
    produced_commands,
    read_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=READ_MODELS)
def module_settings(request: pytest.FixtureRequest, base_settings: Settings,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Each read-model backend in turn (rocksdb, postgresql): the projection writes it, the API reads it."""
    s = module_settings_for(base_settings, tmp_path_factory, f"api-reads-{request.param}", wait_max_s=60.0)
    with read_model_on(request.param, s, request) as on:
        yield on


@pytest.fixture(scope="module")
def client(spark, module_settings: Settings) -> Iterator[TestClient]:  # noqa: ANN001
    """The API on the live pipeline, with "shared" (owner alice, editor bob, reader carol; version 4, {"t": 1})
    and "tomb" (owner alice, reader carol; deleted at version 3) made through it."""
    with live_pipeline(spark, module_settings), api_client(module_settings) as c:
        alice, bob = wait(module_settings, "alice"), wait(module_settings, "bob")
        decided(c.post("/objects", json={"id": "shared", "document": {"t": 0}}, headers=alice), 201, '"1"')
        decided(c.put("/objects/shared/editors/bob", headers=alice), 200, '"2"')
        decided(c.put("/objects/shared/readers/carol", headers=alice), 200, '"3"')
        decided(c.patch("/objects/shared", json={"t": 1}, headers=bob), 200, '"4"')
        decided(c.post("/objects", json={"id": "tomb", "document": {"t": 2}}, headers=alice), 201, '"1"')
        decided(c.put("/objects/tomb/readers/carol", headers=alice), 200, '"2"')
        decided(c.delete("/objects/tomb", headers=alice), 204, '"3"')
        read_until(c, "/objects/shared", auth(module_settings, "alice"), '"4"')
        read_until(c, "/objects/tomb", auth(module_settings, "alice"), '"3"')
        yield c


def wait(settings: Settings, who: str) -> dict[str, str]:
    return {**auth(settings, who), "Prefer": "wait=60"}


def test_owner_editors_and_readers_read(client: TestClient, module_settings: Settings) -> None:
    for who in ("alice", "bob", "carol"):
        h = auth(module_settings, who)
        r = client.get("/objects/shared", headers=h)
        assert r.status_code == 200 and r.json() == {"t": 1} and r.headers["etag"] == '"4"', who
        assert client.get("/objects/shared", headers={**h, "If-None-Match": '"4"'}).status_code == 304
        tomb = client.get("/objects/tomb", headers=h)
        gone = is_problem(tomb, 410 if who != "bob" else 404)
        assert gone["code"] == ("DELETED" if who != "bob" else "NOT_FOUND")
        assert tomb.headers.get("etag") == ('"3"' if who != "bob" else None)


@pytest.mark.parametrize("object_id", ["shared", "tomb"])
@pytest.mark.parametrize("if_none_match", [None, '"4"', '"3"', "*"])
def test_an_outsider_gets_exactly_the_answer_for_an_unknown_id(client: TestClient, module_settings: Settings,
                                                               object_id: str, if_none_match: str | None) -> None:
    """Compared with an id of the same length that was never made: the same bytes but for the id, same headers."""
    h = auth(module_settings, "mallory")
    if if_none_match is not None:
        h["If-None-Match"] = if_none_match
    never = object_id.upper()
    hidden, unknown = client.get(f"/objects/{object_id}", headers=h), client.get(f"/objects/{never}", headers=h)
    is_problem(hidden, 404, "NOT_FOUND")
    assert hidden.content == unknown.content.replace(never.encode(), object_id.encode())
    assert dict(hidden.headers) == dict(unknown.headers) and "etag" not in hidden.headers


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


def test_group_grantees_read_and_write_through_the_whole_pipeline(client: TestClient,
                                                                  module_settings: Settings) -> None:
    """group:eng as editor and group:ops as reader: members (by their token's groups) write and read; the validator
    decides from the groups the API copied into each command, the read model's roles answer the reads."""
    s = module_settings
    alice = wait(s, "alice")
    decided(client.post("/objects", json={"id": "team", "document": {"t": 0}}, headers=alice), 201, '"1"')
    decided(client.put("/objects/team/editors/group:eng", headers=alice), 200, '"2"')
    decided(client.put("/objects/team/readers/group:ops", headers=alice), 200, '"3"')
    dave = {**auth(s, "dave", groups=("eng",)), "Prefer": "wait=60"}
    erin = {**auth(s, "erin", groups=("ops",)), "Prefer": "wait=60"}
    decided(client.patch("/objects/team", json={"t": 1}, headers=dave), 200, '"4"')
    is_problem(client.patch("/objects/team", json={"t": 2}, headers=erin), 403, "FORBIDDEN")
    is_problem(client.patch("/objects/team", json={"t": 2}, headers=wait(s, "dave")), 404, "NOT_FOUND")  # no group
    # erin reads through her group alone (read_until only waits: the answer is asserted here)
    r = read_until(client, "/objects/team", auth(s, "erin", groups=("ops",)), '"4"')
    assert (r.status_code, r.json(), r.headers.get("etag")) == (200, {"t": 1}, '"4"'), r.text
    is_problem(client.get("/objects/team", headers=auth(s, "erin")), 404, "NOT_FOUND")  # without it: unknown
    assert client.get("/objects/team", headers=auth(s, "dave", groups=("eng",))).json() == {"t": 1}
    is_problem(client.get("/objects/team", headers=auth(s, "frank", groups=("sales",))), 404, "NOT_FOUND")
    cmd = next(c for c in produced_commands(s, 50) if c.object_id == "team" and c.principal == "dave")
    assert cmd.groups == ("eng",) and cmd.issuer == s.local_issuer_id and cmd.jti
    # every record the API produced carries a genuine signature header (what lets the validator decide it)
    checker = signer_for(s)
    records = [m for m in consume_all(s, s.topic_commands, 50, timeout=5) if m.key() == b"team"]
    assert len(records) == 6 and all(
        checker.problem(m.key(), m.value(), dict(m.headers() or [])[SIGNATURE_HEADER]) is None for m in records)


def test_history_versions_and_lists_answer_the_roles_and_look_unknown_to_an_outsider(
        client: TestClient, module_settings: Settings) -> None:
    """History pages, the document as of each version (folded from the history), the caller's own rejections
    (from the audit trail), and lists by role; an outsider gets exactly the 404 of an unknown id and empty lists."""
    s = module_settings
    alice, bob, carol, mallory = (auth(s, who) for who in ("alice", "bob", "carol", "mallory"))
    # carol (a reader) tries an edit: her own rejection, which only she sees in the history
    is_problem(client.patch("/objects/shared", json={"t": 9}, headers=wait(s, "carol")), 403, "FORBIDDEN")
    for h in (alice, carol):
        first = client.get("/objects/shared/events?limit=2", headers=h).json()
        assert [(e["type"], e["version"], e["principal"]) for e in first["events"]] == [
            ("CREATED", 1, "alice"), ("EDITOR_GRANTED", 2, "alice")] and first["next_after_version"] == 2
        assert first["events"][0]["document"] == {"t": 0} and first["events"][1]["editor"] == "bob"
        rest = client.get("/objects/shared/events?after_version=2", headers=h).json()
        assert [(e["type"], e["version"]) for e in rest["events"]] == [("READER_GRANTED", 3), ("UPDATED", 4)]
        assert rest["events"][1]["patch"] == {"t": 1} and rest["events"][1]["principal"] == "bob"
        assert rest["next_after_version"] is None and "rejections" not in rest
        for version, doc in ((1, {"t": 0}), (3, {"t": 0}), (4, {"t": 1})):
            r = client.get(f"/objects/shared?version={version}", headers=h)
            assert (r.status_code, r.json(), r.headers["etag"]) == (200, doc, f'"{version}"')
        is_problem(client.get("/objects/shared?version=5", headers=h), 404, "VERSION_NOT_FOUND")
        # page sizes at and past their bounds (1..1000), for history and lists alike
        for path in ("/objects/shared/events", "/objects"):
            for limit in (1, 1000):
                assert client.get(f"{path}?limit={limit}", headers=h).status_code == 200, (path, limit)
            for limit in (0, 1001, -1):
                is_problem(client.get(f"{path}?limit={limit}", headers=h), 422, "INVALID_REQUEST")
        assert len(client.get("/objects/shared/events?limit=1", headers=h).json()["events"]) == 1
        is_problem(client.get("/objects/shared/events?after_version=-1", headers=h), 422, "INVALID_REQUEST")
        is_problem(client.get("/objects/shared?version=0", headers=h), 422, "INVALID_REQUEST")
        # a deleted object's history stays readable by its roles; its document before the deletion too
        tomb = client.get("/objects/tomb/events", headers=h).json()["events"]
        assert [e["type"] for e in tomb] == ["CREATED", "READER_GRANTED", "DELETED"]
        assert client.get("/objects/tomb?version=2", headers=h).json() == {"t": 2}
        is_problem(client.get("/objects/tomb?version=3", headers=h), 410, "DELETED")
    with audit_projection_running(s):
        deadline = time.monotonic() + 30
        while True:
            own = client.get("/objects/shared/events?include=rejections", headers=carol).json()["rejections"]
            if own or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert [(r["reason"], r["version"]) for r in own] == [("FORBIDDEN", 4)]
        assert client.get("/objects/shared/events?include=rejections", headers=bob).json()["rejections"] == []
    # lists: by role, keyset pages without gap or duplicate; deleted objects are not listed
    def ids(h: dict[str, str], query: str = "") -> list[str]:
        got, cursor = [], None
        while True:
            page = client.get(f"/objects?limit=1{query}" + (f"&cursor={cursor}" if cursor else ""), headers=h).json()
            got += [i["id"] for i in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return got
    mine = ids(alice)
    assert "shared" in mine and "tomb" not in mine and len(mine) == len(set(mine))
    assert mine == [i["id"] for i in client.get("/objects?role=owner", headers=alice).json()["items"]]
    assert "shared" in ids(bob, "&role=editor") and "shared" not in ids(bob, "&role=reader")
    assert "shared" in ids(carol, "&role=reader") and "shared" not in ids(carol, "&role=owner")
    listed = client.get("/objects?role=reader", headers=carol).json()["items"]
    shared = next(i for i in listed if i["id"] == "shared")
    assert shared["version"] == 4
    after = client.get(f"/objects?role=reader&updated_since={shared['updated_at'].replace('+', '%2B')}",
                       headers=carol).json()["items"]
    assert "shared" in [i["id"] for i in after]
    assert client.get("/objects", headers=mallory).json() == {"items": [], "next_cursor": None}
    is_problem(client.get("/objects?cursor=bm9wZQ", headers=alice), 400, "INVALID_CURSOR")
    # the outsider: byte for byte the answer for an id never made, on every history route
    for path in ("/objects/{}/events", "/objects/{}/events?include=rejections", "/objects/{}?version=1"):
        hidden = client.get(path.format("shared"), headers=mallory)
        unknown = client.get(path.format("SHARED"), headers=mallory)
        is_problem(hidden, 404, "NOT_FOUND")
        assert hidden.content == unknown.content.replace(b"SHARED", b"shared")
        assert dict(hidden.headers) == dict(unknown.headers)
