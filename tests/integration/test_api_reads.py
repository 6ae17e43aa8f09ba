"""Who may read: the owner, editors and readers of an object; anyone else gets the 404 of an unknown id. Objects
are made through the API, decided by the real validator and projected by the real DB projection, on each read-model
backend (the shared running Arbiter, ``arbiter_on``: the module's objects and principals carry its tag, a test's
own objects and principals the test's).
And reader grants: PUT / DELETE /objects/{id}/readers/{principal} become GrantReader / RevokeReader."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.settings import Settings
from app.signing import SIGNATURE_HEADER, signer_for
from commands import GrantReader, RevokeReader
from tests.conftest import READ_MODELS
from tests.integration.conftest import SHARED_ON
from tests.integration.test_api_support import (
    audit_projection_running,
    auth,
    consume_all,
    decided,
    is_problem,
    produced_commands,
    read_until,
)

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class World:
    """The module's principals and its two objects on one read-model backend, named with the module's tag."""

    settings: Settings
    client: Any  # fastapi.testclient.TestClient
    alice: str
    bob: str
    carol: str
    mallory: str
    shared: str
    tomb: str


@pytest.fixture(scope="module", params=READ_MODELS)
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """Each read-model backend in turn (rocksdb, postgresql) of the shared running Arbiter, with "shared" (owner
    alice, editor bob, reader carol; version 4, {"t": 1}) and "tomb" (owner alice, reader carol; deleted at version
    3) made through it."""
    s, c = request.getfixturevalue(SHARED_ON[request.param])
    tag = uuid.uuid4().hex[:8]
    w = World(s, c, *(f"{who}-{tag}" for who in ("alice", "bob", "carol", "mallory", "shared", "tomb")))
    alice, bob = wait(s, w.alice), wait(s, w.bob)
    decided(c.post("/objects", json={"id": w.shared, "document": {"t": 0}}, headers=alice), 201, '"1"')
    decided(c.put(f"/objects/{w.shared}/editors/{w.bob}", headers=alice), 200, '"2"')
    decided(c.put(f"/objects/{w.shared}/readers/{w.carol}", headers=alice), 200, '"3"')
    decided(c.patch(f"/objects/{w.shared}", json={"t": 1}, headers=bob), 200, '"4"')
    decided(c.post("/objects", json={"id": w.tomb, "document": {"t": 2}}, headers=alice), 201, '"1"')
    decided(c.put(f"/objects/{w.tomb}/readers/{w.carol}", headers=alice), 200, '"2"')
    decided(c.delete(f"/objects/{w.tomb}", headers=alice), 204, '"3"')
    read_until(c, f"/objects/{w.shared}", auth(s, w.alice), '"4"')
    read_until(c, f"/objects/{w.tomb}", auth(s, w.alice), '"3"')
    yield w


def wait(settings: Settings, who: str) -> dict[str, str]:
    return {**auth(settings, who), "Prefer": "wait=60"}


def test_owner_editors_and_readers_read(world: World) -> None:
    client, w = world.client, world
    for who in (w.alice, w.bob, w.carol):
        h = auth(w.settings, who)
        r = client.get(f"/objects/{w.shared}", headers=h)
        assert r.status_code == 200 and r.json() == {"t": 1} and r.headers["etag"] == '"4"', who
        assert client.get(f"/objects/{w.shared}", headers={**h, "If-None-Match": '"4"'}).status_code == 304
        tomb = client.get(f"/objects/{w.tomb}", headers=h)
        gone = is_problem(tomb, 410 if who != w.bob else 404)
        assert gone["code"] == ("DELETED" if who != w.bob else "NOT_FOUND")
        assert tomb.headers.get("etag") == ('"3"' if who != w.bob else None)


@pytest.mark.parametrize("which", ["shared", "tomb"])
@pytest.mark.parametrize("if_none_match", [None, '"4"', '"3"', "*"])
def test_an_outsider_gets_exactly_the_answer_for_an_unknown_id(world: World, which: str,
                                                               if_none_match: str | None) -> None:
    """Compared with an id of the same length that was never made: the same bytes but for the id, same headers."""
    client, object_id = world.client, getattr(world, which)
    h = auth(world.settings, world.mallory)
    if if_none_match is not None:
        h["If-None-Match"] = if_none_match
    never = object_id.upper()
    hidden, unknown = client.get(f"/objects/{object_id}", headers=h), client.get(f"/objects/{never}", headers=h)
    is_problem(hidden, 404, "NOT_FOUND")
    assert hidden.content == unknown.content.replace(never.encode(), object_id.encode())
    assert dict(hidden.headers) == dict(unknown.headers) and "etag" not in hidden.headers


def test_reader_routes_and_batch_kinds_produce_reader_commands(world: World) -> None:
    client, s, tag = world.client, world.settings, uuid.uuid4().hex[:8]
    alice, carol, dave, rd1, rd2 = (f"{x}-{tag}" for x in ("alice", "carol", "dave", "rd-1", "rd-2"))
    h = auth(s, alice)
    assert client.put(f"/objects/{rd1}/readers/{carol}", headers={**h, "Idempotency-Key": "g1"}).status_code == 202
    assert client.delete(f"/objects/{rd1}/readers/{carol}", headers={**h, "Idempotency-Key": "r1",
                                                                      "If-Match": '"2"'}).status_code == 202
    batch = {"commands": [{"kind": "grant_reader", "object_id": rd2, "reader": dave, "idempotency_key": "g2"},
                          {"kind": "revoke_reader", "object_id": rd2, "reader": dave}]}
    assert client.post("/commands:batch", json=batch, headers=h).status_code == 202
    is_problem(client.put(f"/objects/{rd1}/readers/not%20a%20name", headers=h), 422, "INVALID_REQUEST")
    cmds = sorted((c for c in produced_commands(s, 4) if c.object_id in (rd1, rd2)),
                  key=lambda c: c.object_id)  # stable: one object's commands keep their (partition) order
    assert [(type(c), c.object_id, c.reader, c.principal) for c in cmds] == [
        (GrantReader, rd1, carol, alice), (RevokeReader, rd1, carol, alice),
        (GrantReader, rd2, dave, alice), (RevokeReader, rd2, dave, alice)]
    assert cmds[0].command_id == "g1" and cmds[1].expected_version == 2 and cmds[2].command_id == "g2"


def test_group_grantees_read_and_write_through_the_whole_pipeline(world: World) -> None:
    """group:eng as editor and group:ops as reader: members (by their token's groups) write and read; the validator
    decides from the groups the API copied into each command, the read model's roles answer the reads."""
    client, s, tag = world.client, world.settings, uuid.uuid4().hex[:8]
    alice, dave, erin, frank, team = (f"{x}-{tag}" for x in ("alice", "dave", "erin", "frank", "team"))
    owner = wait(s, alice)
    decided(client.post("/objects", json={"id": team, "document": {"t": 0}}, headers=owner), 201, '"1"')
    decided(client.put(f"/objects/{team}/editors/group:eng", headers=owner), 200, '"2"')
    decided(client.put(f"/objects/{team}/readers/group:ops", headers=owner), 200, '"3"')
    eng = {**auth(s, dave, groups=("eng",)), "Prefer": "wait=60"}
    ops = {**auth(s, erin, groups=("ops",)), "Prefer": "wait=60"}
    decided(client.patch(f"/objects/{team}", json={"t": 1}, headers=eng), 200, '"4"')
    is_problem(client.patch(f"/objects/{team}", json={"t": 2}, headers=ops), 403, "FORBIDDEN")
    is_problem(client.patch(f"/objects/{team}", json={"t": 2}, headers=wait(s, dave)), 404, "NOT_FOUND")  # no group
    # erin reads through her group alone (read_until only waits: the answer is asserted here)
    r = read_until(client, f"/objects/{team}", auth(s, erin, groups=("ops",)), '"4"')
    assert (r.status_code, r.json(), r.headers.get("etag")) == (200, {"t": 1}, '"4"'), r.text
    is_problem(client.get(f"/objects/{team}", headers=auth(s, erin)), 404, "NOT_FOUND")  # without it: unknown
    assert client.get(f"/objects/{team}", headers=auth(s, dave, groups=("eng",))).json() == {"t": 1}
    is_problem(client.get(f"/objects/{team}", headers=auth(s, frank, groups=("sales",))), 404, "NOT_FOUND")
    # every command above was acknowledged by the broker before its answer: reading each partition to its end
    # offsets finds them all (waiting for 50 records, more than a topic of its own held, idled 15 s)
    cmd = next(c for c in produced_commands(s, 0) if c.object_id == team and c.principal == dave)
    assert cmd.groups == ("eng",) and cmd.issuer == s.local_issuer_id and cmd.jti
    # every record the API produced carries a genuine signature header (what lets the validator decide it)
    checker = signer_for(s)
    records = [m for m in consume_all(s, s.topic_commands, 0) if m.key() == team.encode()]
    assert len(records) == 6 and all(
        checker.problem(m.key(), m.value(), dict(m.headers() or [])[SIGNATURE_HEADER]) is None for m in records)


def test_history_versions_and_lists_answer_the_roles_and_look_unknown_to_an_outsider(world: World) -> None:
    """History pages, the document as of each version (folded from the history), the caller's own rejections
    (from the audit trail), and lists by role; an outsider gets exactly the 404 of an unknown id and empty lists."""
    client, s, w, shared, tomb = world.client, world.settings, world, world.shared, world.tomb
    alice, bob, carol, mallory = (auth(s, who) for who in (w.alice, w.bob, w.carol, w.mallory))
    # carol (a reader) tries an edit: her own rejection, which only she sees in the history
    is_problem(client.patch(f"/objects/{shared}", json={"t": 9}, headers=wait(s, w.carol)), 403, "FORBIDDEN")
    for h in (alice, carol):
        first = client.get(f"/objects/{shared}/events?limit=2", headers=h).json()
        assert [(e["type"], e["version"], e["principal"]) for e in first["events"]] == [
            ("CREATED", 1, w.alice), ("EDITOR_GRANTED", 2, w.alice)] and first["next_after_version"] == 2
        assert first["events"][0]["document"] == {"t": 0} and first["events"][1]["editor"] == w.bob
        rest = client.get(f"/objects/{shared}/events?after_version=2", headers=h).json()
        assert [(e["type"], e["version"]) for e in rest["events"]] == [("READER_GRANTED", 3), ("UPDATED", 4)]
        assert rest["events"][1]["patch"] == {"t": 1} and rest["events"][1]["principal"] == w.bob
        assert rest["next_after_version"] is None and "rejections" not in rest
        for version, doc in ((1, {"t": 0}), (3, {"t": 0}), (4, {"t": 1})):
            r = client.get(f"/objects/{shared}?version={version}", headers=h)
            assert (r.status_code, r.json(), r.headers["etag"]) == (200, doc, f'"{version}"')
        is_problem(client.get(f"/objects/{shared}?version=5", headers=h), 404, "VERSION_NOT_FOUND")
        # page sizes at and past their bounds (1..1000), for history and lists alike
        for path in (f"/objects/{shared}/events", "/objects"):
            for limit in (1, 1000):
                assert client.get(f"{path}?limit={limit}", headers=h).status_code == 200, (path, limit)
            for limit in (0, 1001, -1):
                is_problem(client.get(f"{path}?limit={limit}", headers=h), 422, "INVALID_REQUEST")
        assert len(client.get(f"/objects/{shared}/events?limit=1", headers=h).json()["events"]) == 1
        is_problem(client.get(f"/objects/{shared}/events?after_version=-1", headers=h), 422, "INVALID_REQUEST")
        is_problem(client.get(f"/objects/{shared}?version=0", headers=h), 422, "INVALID_REQUEST")
        # a deleted object's history stays readable by its roles; its document before the deletion too
        events = client.get(f"/objects/{tomb}/events", headers=h).json()["events"]
        assert [e["type"] for e in events] == ["CREATED", "READER_GRANTED", "DELETED"]
        assert client.get(f"/objects/{tomb}?version=2", headers=h).json() == {"t": 2}
        is_problem(client.get(f"/objects/{tomb}?version=3", headers=h), 410, "DELETED")
    with audit_projection_running(s):
        deadline = time.monotonic() + 30
        while True:
            own = client.get(f"/objects/{shared}/events?include=rejections", headers=carol).json()["rejections"]
            if own or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert [(r["reason"], r["version"]) for r in own] == [("FORBIDDEN", 4)]
        assert client.get(f"/objects/{shared}/events?include=rejections", headers=bob).json()["rejections"] == []
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
    assert shared in mine and tomb not in mine and len(mine) == len(set(mine))
    assert mine == [i["id"] for i in client.get("/objects?role=owner", headers=alice).json()["items"]]
    assert shared in ids(bob, "&role=editor") and shared not in ids(bob, "&role=reader")
    assert shared in ids(carol, "&role=reader") and shared not in ids(carol, "&role=owner")
    listed = client.get("/objects?role=reader", headers=carol).json()["items"]
    entry = next(i for i in listed if i["id"] == shared)
    assert entry["version"] == 4
    after = client.get(f"/objects?role=reader&updated_since={entry['updated_at'].replace('+', '%2B')}",
                       headers=carol).json()["items"]
    assert shared in [i["id"] for i in after]
    assert client.get("/objects", headers=mallory).json() == {"items": [], "next_cursor": None}
    is_problem(client.get("/objects?cursor=bm9wZQ", headers=alice), 400, "INVALID_CURSOR")
    # the outsider: byte for byte the answer for an id never made, on every history route
    for path in ("/objects/{}/events", "/objects/{}/events?include=rejections", "/objects/{}?version=1"):
        hidden = client.get(path.format(shared), headers=mallory)
        unknown = client.get(path.format(shared.upper()), headers=mallory)
        is_problem(hidden, 404, "NOT_FOUND")
        assert hidden.content == unknown.content.replace(shared.upper().encode(), shared.encode())
        assert dict(hidden.headers) == dict(unknown.headers)
