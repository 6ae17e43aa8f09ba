"""Erasure (issue 30): an object's values leave the audit store and the RocksDB read model for good, the audit
chains still verify, tampering is still caught, and entries written before the v2 envelope are refused, not
broken (rocksdict on disk, no broker)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from rocksdict import AccessType, Rdict

from app.read_models import read_model_root
from app.settings import Settings
from projections.audit import AuditProjection, history, verify
from projections.audit.chain import (
    ENVELOPE_V1,
    GENESIS,
    Entry,
    Head,
    entry_key,
    erased,
    head_key,
    link,
    pack_entry,
    pack_head,
    unpack_entry,
)
from projections.audit.erase import AuditStoreBusy, EraseRefused, entries_about, erase_object
from projections.audit.store import open_primary
from projections.db import DbProjection, ReadModel
from projections.db.erase import ObjectNotDeleted, ReadModelBusy, erase_view
from projections.db.store import DOC, ReadModelStore, current_generation, options
from projections.runner import Item, Record
from schemas import codec
from tests.unit.erasure_support import MARKS, answers, api, check_erased, erasure_items

pytestmark = pytest.mark.unit
SECRET = b"subject-7-home-address-XYZZY"
DELETED = erasure_items("events")[3].record.value  # 'gone''s DELETED event, Avro-encoded
MARK = [m.encode() for m in MARKS]


def _holds(directory: Path, needle: bytes) -> list[str]:
    """Files under ``directory`` whose bytes contain ``needle`` (SST, WAL, MANIFEST, anything)."""
    return [str(p) for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


def _audit(path: Path) -> None:
    """Two objects' records over two partitions of events and one of rejections, as the projection appends them:
    opaque values but for 'gone''s DELETED event (what an erasure requires of the audit trail)."""
    p = AuditProjection(path, sync=True)
    rec = [("events", 0, 0, b"gone", b"CREATED " + MARK[0]), ("events", 0, 1, b"kept", b"CREATED kept"),
           ("events", 1, 0, b"gone", b"UPDATED " + MARK[1]), ("rejections", 0, 0, b"gone", b"REJECTED " + MARK[2]),
           ("events", 0, 2, b"gone", DELETED)]
    p.apply([Item(Record(t, part, off, k, v, 1_700_000_000_000 + off), None, "opaque") for t, part, off, k, v in rec])
    p.close()


def test_erase_drops_the_values_keeps_the_chains_verifiable_and_records_itself(tmp_path: Path) -> None:
    path = tmp_path / "audit"
    _audit(path)
    assert all(_holds(path, mark) for mark in MARK)
    done = erase_object(path, "gone", "GDPR art. 17 request #12")
    assert done.erased == {("events", 0): [0], ("events", 1): [0], ("rejections", 0): [0]}
    assert not any(_holds(path, mark) for mark in MARK), "an erased value is still somewhere in the store's files"
    # every value but the DELETED event's (no document in it: kept, as the read model's tombstone is)
    assert [(e.topic, e.seq, e.value) for e in entries_about(path, "gone") if e.erased is None] == [
        ("events", 2, DELETED)]
    report = verify(path)
    assert report.ok, report.problems
    assert report.erased == {("events", 0): 1, ("events", 1): 1, ("rejections", 0): 1}
    assert sorted(h.outcome for h in history(path, "gone")) == ["ACCEPTED"] + ["ERASED"] * 3
    assert [e.value for e in entries_about(path, "kept")] == [b"CREATED kept"]
    # twice is harmless: nothing left to erase, no second erasure entry
    assert erase_object(path, "gone", "again").count == 0
    # the projection appends after the erasure entries at the right offsets
    p = AuditProjection(path, sync=True)
    p.apply([Item(Record("events", 0, 3, b"kept", b"UPDATED kept", 1), None, "opaque")])
    p.close()
    assert verify(path).ok


def _rewrite(path: Path, topic: str, partition: int, seq: int, change) -> None:  # noqa: ANN001
    db = open_primary(path)
    key = entry_key(topic, partition, seq)
    stored, entry = unpack_entry(key, db[key])
    db[key] = pack_entry(stored, change(entry))
    db.close()


@pytest.mark.parametrize(("what", "change", "kind"), [
    ("a kept value changed", lambda e: replace(e, value=b"CREATED k3pt"), "tampered"),
    ("a value dropped with no erasure entry", erased, "erased"),
    ("an erased value's digest changed", lambda e: replace(e, erased=replace(e.erased, digest=bytes(32))),
     "tampered"),
])
def test_tampering_is_still_caught_after_an_erasure(tmp_path: Path, what: str, change, kind: str) -> None:  # noqa: ANN001
    path = tmp_path / "audit"
    _audit(path)
    erase_object(path, "gone", "request")
    target = ("events", 0, 0) if "erased value" in what else ("events", 0, 1)
    _rewrite(path, *target, change)
    report = verify(path)
    assert [(p.topic, p.partition, p.seq, p.kind) for p in report.problems] == [(*target, kind)], what


def test_entries_written_before_the_v2_envelope_still_verify_and_are_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "audit"
    db = open_primary(path)
    h = GENESIS
    deleted = codec.encode_event(replace(codec.decode_event(DELETED), object_id="old"))
    for seq in range(3):
        e = Entry("events", 0, seq, seq, 0, b"old", SECRET if seq < 2 else deleted, ENVELOPE_V1)
        h = link(h, e)
        db[entry_key("events", 0, seq)] = pack_entry(h, e)
        db[b"x" + b"old\x00" + entry_key("events", 0, seq)] = b""
    db[head_key("events", 0)] = pack_head(Head(h, 3, 3))
    db.close()
    assert verify(path).ok
    with pytest.raises(EraseRefused, match="before issue 30"):
        erase_object(path, "old", "request")
    assert [e.value for e in entries_about(path, "old")] == [SECRET, SECRET, deleted] and verify(path).ok
    with pytest.raises(ValueError, match="v1"):
        erased(Entry("events", 0, 0, 0, 0, b"old", SECRET, ENVELOPE_V1))


def test_erase_refuses_while_the_audit_projection_holds_the_store(tmp_path: Path) -> None:
    path = tmp_path / "audit"
    _audit(path)
    running = AuditProjection(path)
    try:
        with pytest.raises(AuditStoreBusy):
            erase_object(path, "gone", "request")
    finally:
        running.close()


def test_read_model_erasure_keeps_the_tombstone_and_drops_the_documents_history_and_list_rows(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    root = read_model_root(s)
    items = erasure_items(s.topic_events)
    projection = DbProjection(ReadModelStore.open_current(root))
    projection.apply(items[:3])
    projection.close()  # the live document and history reach an SST file, where only a compaction removes them
    projection = DbProjection(ReadModelStore.open_current(root))
    projection.apply(items[3:])
    reader = ReadModel(root, refresh_s=0)
    client = api(s, reader)
    before = answers(client, s)
    assert before["/objects/gone/events"][0] == 200 and MARKS[1] in before["/objects/gone/events"][1]
    assert before["/objects/gone?version=1"] == (200, json.dumps({"address": MARKS[0]}, separators=(",", ":")))
    assert all(_holds(root, m.encode()) for m in MARKS[:2])
    with pytest.raises(ReadModelBusy):
        erase_view(root, "gone")
    projection.close()
    with pytest.raises(ObjectNotDeleted):
        erase_view(root, "kept")
    sizes = ReadModel(root, refresh_s=0).history_size()
    tombstone = erase_view(root, "gone")
    assert tombstone is not None and tombstone.deleted and tombstone.version == 4 and tombstone.document == {}
    assert tombstone.readers == ("carol",), "the tombstone keeps its roles: they are told 410, others 404"
    assert not [m for m in MARKS[:2] if _holds(root, m.encode())], "an old document is still in the read model's files"
    reader.refresh()
    check_erased(client, s)
    assert reader.history("gone") == [] and len(reader.history("kept")) == 2
    after = reader.history_size()
    assert after["events"] == sizes["events"] - 4 and 0 < after["bytes"] < sizes["bytes"]
    reader.close()
    store = ReadModelStore.open_current(root)
    assert dict(store.views())["kept"].document == {"a": 1, "b": 2} and store.offsets() == {(s.topic_events, 0): 6}
    store.close()
    generation = current_generation(root)
    assert generation is not None
    db = Rdict(str(generation), options(), access_type=AccessType.read_only())
    try:
        left = [k for k, _ in db.items() if b"gone" in k and not k.startswith(DOC)]  # type: ignore[operator]
    finally:
        db.close()
    assert left == [], "history or list rows of the erased object are left"
    assert erase_view(root, "gone") == tombstone, "erasing twice is harmless"


def test_erasing_an_object_named_arbiter_rules_keeps_the_rules_deploys(tmp_path: Path) -> None:
    """Issue 47, finding 7: before ids starting ``arbiter:`` were reserved, a user's object could be named
    ``arbiter:rules`` and share the audit index of the rules deploys; erasing it drops its decisions only."""
    from datetime import UTC, datetime

    from commands import CreateObject, DeleteObject, decide
    from commands.rules import canonical_rules, rules_digest
    from projections.audit.deploys import RULES_OBJECT
    from schemas.rules_control import Deploy, Placed, encode_control, encode_placed

    t0 = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
    doc = canonical_rules('{"rules": 1, "types": {}}')
    claim = encode_control(Deploy(1, rules_digest(doc), doc, "ops:alice", t0))
    placed = encode_placed(Placed(1, rules_digest(doc), "ops:alice", t0, "commands", {0: 3}))
    state, events = None, []
    for c in (CreateObject("m1", "squatted", "mallory", t0, document=json.dumps({"a": MARKS[0]})),
              DeleteObject("m2", "squatted", "mallory", t0)):
        d = decide(state, c)
        state = d.state
        events.append(replace(d.outcome, object_id=RULES_OBJECT))  # as decided before the namespace was reserved
    p = AuditProjection(tmp_path / "audit", sync=True)
    p.apply([Item(Record("cmds-rules", 0, 0, RULES_OBJECT.encode(), claim, 1), None, "opaque"),
             Item(Record("cmds-rules", 0, 1, RULES_OBJECT.encode(), placed, 2), None, "opaque")]
            + [Item(Record("events", 0, n, RULES_OBJECT.encode(), codec.encode_event(ev), 3 + n), ev)
               for n, ev in enumerate(events)])
    p.close()
    done = erase_object(tmp_path / "audit", RULES_OBJECT, "GDPR art. 17 request #13")
    assert done.erased == {("events", 0): [0]}  # the user's create; its deletion is kept, as always
    kept = {e.value for e in entries_about(tmp_path / "audit", RULES_OBJECT) if e.erased is None}
    assert claim in kept and placed in kept
    assert [h.outcome for h in history(tmp_path / "audit", RULES_OBJECT)][:2] == ["DEPLOYED", "PLACED"]
    assert verify(tmp_path / "audit").ok
