"""A 202 means the command is on the commands topic: right key, Java's murmur2 partition, codec Avro bytes."""

from __future__ import annotations

import json

import pytest

from app.settings import Settings
from app.validator.murmur2 import partition_for
from commands import CreateObject, DeleteObject, GrantEditor, RevokeEditor, UpdateObject
from schemas import codec
from tests.integration.test_api_support import api_client, auth, consume_all

pytestmark = pytest.mark.integration


def test_202_command_is_on_the_topic_keyed_partitioned_and_encoded(settings: Settings) -> None:
    with api_client(settings) as client:
        h = auth(settings, "alice")
        created = client.post("/objects", json={"id": "doc-1", "document": {"title": "hi", "n": [1, 2]}},
                              headers={**h, "Idempotency-Key": "create-doc-1"})
        patched = client.patch("/objects/doc-1", json={"title": None}, headers={**h, "If-Match": '"1"'})
        granted = client.put("/objects/doc-1/editors/bob", headers=h)
        revoked = client.delete("/objects/doc-1/editors/bob", headers=h)
        deleted = client.delete("/objects/doc-1", headers=h)
        fresh = client.post("/objects", json={"document": {}}, headers=h)
    answers = [created, patched, granted, revoked, deleted, fresh]
    for r in answers:
        assert r.status_code == 202, r.text
        assert r.headers["location"] == f"/commands/{r.json()['command_id']}"
    assert created.json()["command_id"] == "create-doc-1"
    fresh_id = fresh.json()["object_id"]
    assert fresh_id and fresh_id != "doc-1"

    records = consume_all(settings, settings.topic_commands, len(answers))
    assert len(records) == len(answers)
    by_id = {codec.decode_command(m.value()).command_id: m for m in records}
    for r in answers:
        body = r.json()
        m = by_id[body["command_id"]]
        assert m.key() == body["object_id"].encode()
        assert m.partition() == partition_for(m.key(), settings.partitions) == body["partition"]
        assert m.offset() == body["offset"]
        assert codec.schema_id_of(m.value()) == codec.schema_id_of(codec.encode_command(codec.decode_command(m.value())))

    cmds = [codec.decode_command(by_id[r.json()["command_id"]].value()) for r in answers]
    assert [type(c) for c in cmds] == [CreateObject, UpdateObject, GrantEditor, RevokeEditor, DeleteObject, CreateObject]
    assert all(c.principal == "alice" for c in cmds)
    assert json.loads(cmds[0].document) == {"title": "hi", "n": [1, 2]}
    assert cmds[0].expected_version is None
    assert json.loads(cmds[1].patch) == {"title": None} and cmds[1].expected_version == 1
    assert cmds[2].editor == cmds[3].editor == "bob"
    assert cmds[0].issued_at.tzinfo is not None


def test_batch_one_result_per_command_in_order(settings: Settings) -> None:
    items = [{"kind": "create", "object_id": f"b-{i}", "document": {"i": i}, "idempotency_key": f"k-{i}"}
             for i in range(50)]
    items += [{"kind": "update", "object_id": "b-0", "patch": {"i": None}, "expected_version": 1},
              {"kind": "grant_editor", "object_id": "b-1", "editor": "carol"},
              {"kind": "revoke_editor", "object_id": "b-1", "editor": "carol"},
              {"kind": "delete", "object_id": "b-2"}]
    with api_client(settings) as client:
        r = client.post("/commands:batch", json={"commands": items}, headers=auth(settings, "bob"))
    assert r.status_code == 202, r.text
    results = r.json()["results"]
    assert [x["object_id"] for x in results] == [it["object_id"] for it in items]
    assert [x["command_id"] for x in results[:50]] == [f"k-{i}" for i in range(50)]
    assert all(x["status"] == 202 for x in results)
    records = consume_all(settings, settings.topic_commands, len(items))
    assert len(records) == len(items)
    placed = {(m.partition(), m.offset()): m for m in records}
    for x in results:
        m = placed[(x["partition"], x["offset"])]
        cmd = codec.decode_command(m.value())
        assert cmd.command_id == x["command_id"] and cmd.object_id == x["object_id"] == m.key().decode()
        assert cmd.principal == "bob"
        assert m.partition() == partition_for(m.key(), settings.partitions)
    # per object, the batch's order is the topic's order (one partition per object)
    b0 = sorted((m for m in records if m.key() == b"b-0"), key=lambda m: m.offset())
    assert [type(codec.decode_command(m.value())) for m in b0] == [CreateObject, UpdateObject]
