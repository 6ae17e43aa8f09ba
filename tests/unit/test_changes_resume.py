"""The change feed's trust boundaries without a broker: a resumed stream replays only what its caller may read
now (as history answers it), ids bound to their principal, the token's expiry, retention striking mid-catch-up,
one JSON rule with GET, and audit-trail lookups that never stall each other."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from app.api import json_out
from app.api.changes import cursor, frames
from app.api.changes.current import CurrentAccess
from app.api.changes.fanout import ChangeFeed
from app.api.changes.reader import Expired
from app.api.changes.roles import AuditRoles, RolesBook, RolesUnknown
from app.api.changes.stream import Plan, events
from app.api.identity import dev_token
from app.api.main import create_app
from app.settings import Settings
from commands import Event, EventType
from commands.access import Roles, roles_after
from projections.audit import AuditProjection
from projections.runner import Item, Record
from schemas import codec
from tests.unit.fake_read_model import FakeReadModel, View
from tests.unit.test_changes import ev

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.unit
KEY = cursor.key_of("a test secret")
Rec = tuple[int, int, Event]


class FoldedRoles:
    """The audit trail's answer, folded from the test's own records (what ``AuditRoles`` reads from the store)."""

    def __init__(self, records: list[Rec]) -> None:
        self.records = records

    def roles_before(self, object_id: str, topic: str, partition: int, offset: int) -> Roles | None:
        roles: Roles | None = None
        for p, o, e in self.records:
            if p == partition and o < offset and e.object_id == object_id:
                roles = roles_after(roles, e)
        return roles


class Reader:
    """``RangeReader``'s contract over a list of records: two records a read; after ``expire_after`` reads, or at
    the ``expire_at_assign``-th assign, Expired (retention deleted what the range needs)."""

    def __init__(self, records: list[Rec], expire_after: int | None = None,
                 expire_at_assign: int | None = None) -> None:
        self.records, self.expire_after, self.expire_at_assign = records, expire_after, expire_at_assign
        self._todo: list[Rec] = []
        self.reads = self.assigns = 0

    def assign(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> None:
        self.assigns += 1
        if self.assigns == self.expire_at_assign:
            raise Expired(0, 0, 1)
        self._todo = [(p, o, e) for p, o, e in self.records if p in starts and starts[p] <= o < ends.get(p, 0)]

    @property
    def done(self) -> bool:
        return not self._todo

    def read(self) -> list[tuple[int, int, Event | None]]:
        if self.expire_after is not None and self.reads >= self.expire_after:
            raise Expired(0, self._todo[0][1], self._todo[0][1] + 1)
        self.reads += 1
        batch, self._todo = self._todo[:2], self._todo[2:]
        return list(batch)

    def close(self) -> None:
        pass


@dataclass
class Erasable(FakeReadModel):
    """A read model with histories: an object listed in ``erased`` has none (``arbiter erase`` ran)."""

    erased: tuple[str, ...] = ()

    def history(self, object_id: str, after: int = 0, limit: int | None = None) -> list[Any]:
        return [] if object_id in self.erased else [object()]


def resumed(principal: str, records: list[Rec], now: FakeReadModel, *, start: int = 0, groups: tuple[str, ...] = (),
            same_groups: bool = True, object_id: str | None = None, expires_at: float = 2e9,
            reader: Reader | None = None) -> tuple[list[tuple[str, dict[str, Any], str | None]], bool]:
    """Resume ``principal``'s stream from ``start`` of partition 0 over ``records``; return its frames up to going
    live (kind, data, id) and whether the stream ended by itself before that."""
    end = max(o for _, o, _ in records) + 1
    feed = ChangeFeed("unused:9092", "events", FoldedRoles(records), max_subscribers=9, max_per_principal=9,
                      max_queue=100, retry_after_s=2)
    feed._positions = {0: end}  # the feed hands on from the catch-up's end: phase 2 reads nothing
    ids = cursor.Ids(KEY, principal, groups)
    plan = Plan(principal, groups, object_id, [0], {0: start}, {0: end}, expires_at, 60, ids, same_groups)

    async def run() -> tuple[list[bytes], bool]:
        gen = events(plan, feed, feed.subscriber(principal, groups, object_id), reader or Reader(records),
                     RolesBook(feed.book.source, "events"), CurrentAccess(now, principal, groups))
        out: list[bytes] = []
        async for chunk in gen:
            if chunk == b": live\n\n":
                await gen.aclose()
                return out, False
            out.append(chunk)
        return out, True

    chunks, ended = asyncio.run(run())
    parsed = []
    for chunk in chunks:
        lines = dict(line.split(": ", 1) for line in chunk.decode().strip().split("\n"))
        parsed.append((lines["event"], json.loads(lines["data"]), lines.get("id")))
    return parsed, ended


def seen(parsed: list[tuple[str, dict[str, Any], str | None]]) -> list[tuple[str, str, int]]:
    return [(k, d.get("object_id", d.get("code")), d.get("version", 0)) for k, d, _ in parsed]


def shared_with_finance_and_revoked() -> list[Rec]:
    return [(0, 0, ev("x", 1, EventType.CREATED, document='{"secret": 1}')),
            (0, 1, ev("x", 2, EventType.READER_GRANTED, reader="group:finance")),
            (0, 2, ev("x", 3, EventType.UPDATED, patch='{"secret": 2}')),
            (0, 3, ev("x", 4, EventType.READER_REVOKED, reader="group:finance")),
            (0, 4, ev("y", 1, EventType.CREATED, owner="carol", document="{}"))]


def test_a_newcomer_to_a_group_cannot_replay_what_was_shared_with_it_and_revoked_since() -> None:
    """Carol joins finance today and resumes /changes from an id she was given before: x was shared with
    group:finance and revoked since, so GET /objects/x/events answers her 404 — and the feed gives her nothing of x
    (its content or its existence), only her own y. With an id given while she was already in finance, she is
    told (access-revoked) that x ended, nothing of its content. Break caught: ``now = None`` in ``_Catchup._kind``
    (the old rule: the past judged with today's groups) sends her x's grant, its secret patch and the revoke."""
    now = FakeReadModel({"x": View({"secret": 2}, 4), "y": View({}, 1, owner="carol")})
    records = shared_with_finance_and_revoked()
    parsed, _ = resumed("carol", records, now, groups=("finance",), same_groups=False)
    assert seen(parsed) == [("change", "y", 1)]
    parsed, _ = resumed("carol", records, now, groups=("finance",), same_groups=True)
    assert seen(parsed) == [("access-revoked", "x", 4), ("change", "y", 1)]


def test_a_revoked_reader_resuming_from_an_old_id_gets_nothing_of_its_reader_window() -> None:
    """Bob read x from version 2 until alice revoked him at 5; he resumes from an id of his reader window: the
    updates he missed are not his to read now, so he gets only ``access-revoked`` at 5 — and his object stream
    ends there (access-revoked on a resumed stream). Breaks caught: ``now = None`` (the old rule sends versions 3
    and 4); ``return "access-revoked"`` made ``"change"`` (the revoke arrives as an ordinary change and the
    object's stream stays open)."""
    records = [(0, 0, ev("x", 1, EventType.CREATED, document="{}")),
               (0, 1, ev("x", 2, EventType.READER_GRANTED, reader="bob")),
               (0, 2, ev("x", 3, EventType.UPDATED, patch='{"a": 1}')),
               (0, 3, ev("x", 4, EventType.UPDATED, patch='{"a": 2}')),
               (0, 4, ev("x", 5, EventType.READER_REVOKED, reader="bob")),
               (0, 5, ev("x", 6, EventType.UPDATED, patch='{"a": 3}'))]
    now = FakeReadModel({"x": View({"a": 3}, 6)})
    parsed, ended = resumed("bob", records, now, start=2)
    assert seen(parsed) == [("access-revoked", "x", 5)] and not ended
    parsed, ended = resumed("bob", records, now, start=2, object_id="x")
    assert seen(parsed) == [("access-revoked", "x", 5)] and ended
    ids = cursor.Ids(KEY, "bob", ())
    assert ids.decode(parsed[0][2] or "").offsets == {0: 5}  # resuming again starts after the revoke


def test_a_reader_now_gets_the_past_as_history_serves_it_and_a_lagging_read_model_defers_to_the_fold() -> None:
    """Dave, a reader now, gets every event of x since his id, even those from before his grant (history serves
    them all to him). Where the read model has not reached an event yet, the roles folded up to it decide, as
    live: a revoke the view does not know of yet is ``access-revoked``."""
    records = [(0, 0, ev("x", 1, EventType.CREATED, document="{}")),
               (0, 1, ev("x", 2, EventType.UPDATED, patch='{"a": 1}')),
               (0, 2, ev("x", 3, EventType.READER_GRANTED, reader="dave")),
               (0, 3, ev("x", 4, EventType.READER_REVOKED, reader="dave"))]
    current = FakeReadModel({"x": View({"a": 1}, 3, readers=("dave",))})
    parsed, _ = resumed("dave", records, current)
    assert seen(parsed) == [("change", "x", 1), ("change", "x", 2), ("change", "x", 3), ("access-revoked", "x", 4)]


def test_an_erased_object_is_replayed_to_nobody() -> None:
    """``arbiter erase`` made x's history 410 to everyone, its owner too: a resumed stream replays none of it.
    Break caught: dropping the erased check in ``CurrentAccess._look``."""
    records = [(0, 0, ev("x", 1, EventType.CREATED, document='{"pii": 1}')), (0, 1, ev("x", 2, EventType.DELETED))]
    tomb = View({}, 2, deleted=True)
    assert seen(resumed("alice", records, Erasable({"x": tomb}))[0]) == [("change", "x", 1), ("change", "x", 2)]
    assert resumed("alice", records, Erasable({"x": tomb}, erased=("x",)))[0] == []


# -- the token, retention ------------------------------------------------------------------------------------------

def test_a_stream_never_outlives_its_token() -> None:
    """Live: a token expiring in 0.3 s ends the idle stream with ``reset`` TOKEN_EXPIRED within a tick. Resumed
    with an expired token: the reset comes before any frame, its id the one resumed from. Breaks caught: the live
    loop's expiry check left out (the stream stays open: timeout); the catch-up's left out (frames sent)."""
    feed = ChangeFeed("unused:9092", "events", FoldedRoles([]), max_subscribers=9, max_per_principal=9,
                      max_queue=100, retry_after_s=2)
    feed._positions = {0: 7}
    ids = cursor.Ids(KEY, "alice", ())
    plan = Plan("alice", (), None, [0], None, {}, time.time() + 0.3, 60, ids)

    async def live() -> list[bytes]:
        gen = events(plan, feed, feed.subscriber("alice", (), None), None, RolesBook(feed.book.source, "events"),
                     None)
        return [chunk async for chunk in gen]

    out = asyncio.run(asyncio.wait_for(live(), 5))
    assert out[0] == b": live\n\n" and len(out) == 2
    assert b'"code":"TOKEN_EXPIRED"' in out[1] and ids.encode({0: 7}).encode() in out[1]
    records = [(0, 0, ev("x", 1, EventType.CREATED, document="{}")), (0, 1, ev("x", 2, EventType.UPDATED, patch="{}"))]
    parsed, ended = resumed("alice", records, FakeReadModel({"x": View({}, 2)}), expires_at=time.time() - 1)
    assert seen(parsed) == [("reset", "TOKEN_EXPIRED", 0)] and ended
    assert parsed[0][1]["resume_from"] == cursor.Ids(KEY, "alice", ()).encode({0: 0})


def test_retention_striking_during_the_catch_up_ends_the_stream_with_changes_expired() -> None:
    """The first read brings versions 1 and 2; then the topic no longer keeps what follows: ``reset``
    CHANGES_EXPIRED, its ``resume_from`` just past version 2, and the stream ends. So too when retention strikes
    between the first read of the catch-up and the second (attached) one's start. Breaks caught: the ``except
    Expired`` clause left out (the stream dies with an exception, no reset); main's, which covered only the reads
    (an assign's Expired broke the connection without a reset, seen in test_api_changes)."""
    records = [(0, o, ev("x", o + 1, EventType.CREATED if o == 0 else EventType.UPDATED, document="{}"
                         if o == 0 else None, **({} if o == 0 else {"patch": "{}"}))) for o in range(4)]
    parsed, ended = resumed("alice", records, FakeReadModel({"x": View({}, 4)}), reader=Reader(records, 1))
    assert seen(parsed) == [("change", "x", 1), ("change", "x", 2), ("reset", "CHANGES_EXPIRED", 0)] and ended
    assert parsed[-1][1]["resume_from"] == parsed[1][2] == cursor.Ids(KEY, "alice", ()).encode({0: 2})
    parsed, ended = resumed("alice", records, FakeReadModel({"x": View({}, 4)}), reader=Reader(records,
                                                                                                expire_at_assign=2))
    assert [k for k, _, _ in parsed] == ["change"] * 4 + ["reset"] and ended
    assert parsed[-1][1]["code"] == "CHANGES_EXPIRED" and parsed[-1][1]["resume_from"] == parsed[3][2]


# -- one JSON rule -------------------------------------------------------------------------------------------------

BIG = '{"big": 18446744073709551617, "neg": -1180591620717411303424, "n": [1.5, "\u00fc"]}'


def test_the_feed_serves_integers_beyond_64_bits_exactly_as_get_does() -> None:
    """2**64+1 and -2**70 in a document and a patch reach a ``change`` frame as those integers, in the very bytes
    GET /objects/{id} serves; a document JSON cannot say (NaN) is left out with ``error`` UNSERVABLE_DOCUMENT and
    the feed goes on. Break caught: ``orjson.loads`` back in ``frames.event_data`` (both turn into floats)."""
    data = frames.event_data(ev("x", 1, EventType.CREATED, document=BIG))
    body = json.loads(data)
    assert body["document"] == {"big": 2**64 + 1, "neg": -(2**70), "n": [1.5, "ü"]}
    assert type(body["document"]["big"]) is int and type(body["document"]["neg"]) is int
    patch = json.loads(frames.event_data(ev("x", 2, EventType.UPDATED, patch=BIG)))["patch"]
    assert patch["big"] == 2**64 + 1 and type(patch["neg"]) is int
    settings = Settings()
    app = create_app(settings, read_model=FakeReadModel({"x": View(json.loads(BIG), 1)}))
    got = TestClient(app).get("/objects/x", headers={
        "Authorization": f"Bearer {dev_token(settings, 'alice', ttl_s=60)}"})
    assert got.status_code == 200 and data.endswith(b'"document":' + got.content + b"}")
    nan = json.loads(frames.event_data(ev("x", 1, EventType.CREATED, document='{"x": NaN}')))
    assert nan["error"] == "UNSERVABLE_DOCUMENT" and "document" not in nan and nan["version"] == 1
    assert json_out.parse("[18446744073709551617]") == [2**64 + 1]


# -- the audit trail's lookups -------------------------------------------------------------------------------------

def test_one_lookup_waiting_for_the_audit_trail_never_stalls_another(tmp_path: Path) -> None:
    """A catch-up waits (up to 5 s) for an offset the audit trail has not stored; meanwhile another stream's
    lookup of a stored offset answers at once. Break caught: main's ``roles_before`` (all of it under the one lock:
    the second lookup waits out the first's 5 s)."""
    proj = AuditProjection(tmp_path / "audit", sync=False)
    history = [(0, ev("x", 1, EventType.CREATED, document="{}")), (1, ev("x", 2, EventType.READER_GRANTED,
                                                                         reader="bob"))]
    proj.apply([Item(Record("events", 0, o, e.object_id.encode(), codec.encode_event(e), 0), e) for o, e in history])
    roles = AuditRoles(tmp_path / "audit", wait_s=5.0, poll_s=0.01)
    try:
        assert roles.roles_before("x", "events", 0, 2) is not None  # opened
        waiting = threading.Thread(target=lambda: pytest.raises(RolesUnknown, roles.roles_before, "x", "events", 0, 99))
        waiting.start()
        time.sleep(0.2)  # the first lookup is waiting now
        t0 = time.monotonic()
        got = roles.roles_before("x", "events", 0, 2)
        took = time.monotonic() - t0
        waiting.join()
        assert got == Roles("alice", readers=frozenset({"bob"}), version=2) and took < 2.5, took
    finally:
        roles.close()
        proj.close()


# -- the routes' answers to ids ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/changes", "/objects/x/changes"])
def test_a_forged_or_someone_elses_id_is_400_invalid_cursor(path: str) -> None:
    """``c1.AQAA`` (partition 0 from offset 0, the old unsigned form), an id made for alice sent by bob, and an id
    of another deployment's key: 400 INVALID_CURSOR before any stream is opened. Break caught: not comparing the
    MAC in ``Ids.decode``."""
    settings = Settings()
    app = create_app(settings, read_model=FakeReadModel({"x": View({}, 1, readers=("bob",))}))
    client = TestClient(app)
    bob = {"Authorization": f"Bearer {dev_token(settings, 'bob', ttl_s=60)}"}
    alices = cursor.Ids(cursor.key_of(settings.auth_secret.get_secret_value()), "alice", ()).encode({0: 0})
    others = cursor.Ids(cursor.key_of("another deployment"), "bob", ()).encode({0: 0})
    for forged in ("c1.AQAA", alices, others):
        r = client.get(path, headers={**bob, "Last-Event-ID": forged})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_CURSOR", (forged, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
