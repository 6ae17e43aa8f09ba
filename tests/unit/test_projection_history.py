"""History and lists kept by the DB projection (RocksDB store): folding an object's stored history up to each version
gives the very bytes the read model held at that version, and the access index always equals the views' roles."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    GrantReader,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    decide,
)
from commands.state import ObjectState
from projections.db import indexes
from projections.db.history import fold
from projections.db.lists import Role, grantees, micros
from projections.db.projection import DbProjection
from projections.db.store import ReadModelStore, doc_key, iter_views
from projections.db.view import ObjectView
from projections.rocks import prefixed
from projections.runner import Item, Record

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
IDS = ("o1", "o2", "o3")
WHO = ("alice", "bob", "carol", "group:eng")
values = st.one_of(st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3),
                   st.none())
docs = st.dictionaries(st.sampled_from("abc"), values, max_size=3)


@st.composite
def commands(draw: st.DrawFn) -> list[Command]:
    """Commands a few principals send about a few objects, at rising times (some at the same microsecond)."""
    out: list[Command] = []
    at = T0
    for i in range(draw(st.integers(1, 30))):
        at += timedelta(microseconds=draw(st.sampled_from([0, 1, 999_999, 1_000_000])))
        oid, who = draw(st.sampled_from(IDS)), draw(st.sampled_from(WHO[:3]))
        grantee = draw(st.sampled_from(WHO))
        kind = draw(st.sampled_from(["create", "update", "update", "delete", "ge", "re", "gr", "rr"]))
        base = (f"c{i}", oid, who, at)
        if kind == "create":
            out.append(CreateObject(*base, document=json.dumps(draw(docs))))
        elif kind == "update":
            out.append(UpdateObject(*base, patch=json.dumps(draw(docs))))
        elif kind == "delete":
            out.append(DeleteObject(*base))
        else:
            grant = {"ge": GrantEditor, "re": RevokeEditor, "gr": GrantReader, "rr": RevokeReader}[kind]
            out.append(grant(*base, **{"editor" if kind[1] == "e" else "reader": grantee}))
    return out


def _events(cmds: list[Command]) -> list[Event]:
    states: dict[str, ObjectState | None] = {}
    out = []
    for c in cmds:
        d = decide(states.get(c.object_id), c)
        states[c.object_id] = d.state
        if isinstance(d.outcome, Event):
            out.append(d.outcome)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cmds=commands(), data=st.data())
def test_history_folds_to_the_read_models_view_at_every_version_byte_for_byte(cmds: list[Command],
                                                                                data: st.DataObject) -> None:
    events = _events(cmds)
    # Another producer's patch the read model cannot hold (NaN): the version lands, the document is quarantined.
    events = [replace(e, patch='{"a": NaN}') if e.patch is not None and data.draw(st.integers(0, 9)) == 0 else e
              for e in events]
    # Delivery as Kafka gives it to the projection: in order per object, in batches of any size, and some batches
    # delivered twice (a replayed Spark batch or a projection restart): duplicates must change nothing.
    sent: list[Event] = []
    i = 0
    while i < len(events):
        n = data.draw(st.integers(1, 5))
        sent += events[i:i + n]
        if data.draw(st.booleans()) and i:
            sent += events[max(0, i - 2):i + n]
        i += n
    with tempfile.TemporaryDirectory() as tmp:
        store = ReadModelStore(Path(tmp) / "gen-1", sync=False)
        projection = DbProjection(store, cache_size=data.draw(st.sampled_from([0, 50])))
        seen: dict[tuple[str, int], bytes] = {}
        offset = 0
        for start in range(0, len(sent), 3):
            batch = []
            for ev in sent[start:start + 3]:
                batch.append(Item(Record("events", 0, offset, ev.object_id.encode(), b"", 0), ev))
                offset += 1
            projection.apply(batch)
            for oid in IDS:
                raw = store._db.get(doc_key(oid))  # the bytes readers are served from
                if raw is not None:
                    seen[(oid, ObjectView.from_bytes(raw).version)] = raw
        for (oid, version), raw in seen.items():
            folded = fold(oid, store.history(oid, up_to=version), version)
            assert folded is not None and folded.to_bytes() == raw, (oid, version)
        # each event that moved a view is history once, in version order; nothing else is
        for oid in IDS:
            versions = [e.version for e in store.history(oid)]
            assert versions == sorted({e.version for e in events if e.object_id == oid})
        _assert_access_index_is_the_views_roles(store)
        store.close()


def _assert_access_index_is_the_views_roles(store: ReadModelStore) -> None:
    want: dict[bytes, bytes] = {}
    for oid, view in iter_views(store._db):
        want.update(indexes.access_keys(oid, view))
    assert dict(prefixed(store._db, indexes.ACCESS)) == want
    # and a page over every role of every principal lists each live, readable object once
    for who in WHO[:3]:
        page = indexes.read_page(store._db, grantees(who, ("eng",), None), 0, None, 100)
        readable = sorted((micros(v.updated_at), oid) for oid, v in iter_views(store._db) if not v.deleted
                          and (who == v.owner or {who, "group:eng"} & set(v.editors + v.readers)))
        assert [i.id for i in page.items] == [oid for _, oid in readable] and not page.more


def test_pages_follow_the_cursor_without_gap_or_duplicate_and_a_change_moves_an_object_to_the_end() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = ReadModelStore(Path(tmp) / "gen-1", sync=False)
        at = [(T0 + timedelta(seconds=i // 2)).isoformat() for i in range(7)]  # pairs share a time: ids break ties
        views = {f"d{i}": ObjectView({}, 1, owner="alice", updated_at=at[i], readers=("bob",)) for i in range(7)}
        store.write(views, {})
        pages, after = [], None
        while True:
            page = indexes.read_page(store._db, grantees("alice", (), Role.OWNER), 0, after, 3)
            pages.append([i.id for i in page.items])
            if not page.more:
                break
            last = page.items[-1]
            after = (last.updated_us, last.id)
        assert pages == [["d0", "d1", "d2"], ["d3", "d4", "d5"], ["d6"]]
        # bob reads them all as a reader, none as an owner; since the third second: d4.. only
        assert [i.id for i in indexes.read_page(store._db, grantees("bob", (), Role.OWNER), 0, None, 9).items] == []
        since = indexes.read_page(store._db, grantees("bob", (), None), int((T0 + timedelta(seconds=2)).timestamp()
                                                                            * 1_000_000), None, 9)
        assert [i.id for i in since.items] == ["d4", "d5", "d6"]
        # d1 changes (and bob loses it): it leaves its old place for alice, and bob's list entirely
        store.write({"d1": ObjectView({}, 2, owner="alice", updated_at=(T0 + timedelta(hours=1)).isoformat())}, {})
        ids = [i.id for i in indexes.read_page(store._db, grantees("alice", (), None), 0, None, 9).items]
        assert ids == ["d0", "d2", "d3", "d4", "d5", "d6", "d1"]
        assert "d1" not in [i.id for i in indexes.read_page(store._db, grantees("bob", (), None), 0, None, 9).items]
        store.close()
