"""The change feed's pure parts: the SSE id codec, the roles fold, and the feed's filter (no broker)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.changes import cursor
from app.api.changes.fanout import ChangeFeed, Subscriber
from app.api.changes.fanout import Item as FeedItem
from app.api.changes.roles import AuditRoles, RolesBook, RolesUnknown
from app.api.changes.stream import CUT_GRACE_S, EventStream, Plan, events
from app.api.problems import ApiError
from commands import Event, EventType
from commands.access import Roles, roles_after
from projections.audit import AuditProjection
from projections.runner import Item, Record
from schemas import codec

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ev(oid: str, version: int, kind: EventType, owner: str = "alice", **kw: str) -> Event:
    return Event(f"e-{oid}-{version}", kind, oid, version, f"c{version}", owner, T0, owner, **kw)


# -- the SSE id ----------------------------------------------------------------------------------------------------

KEY = cursor.key_of("a test secret")
ALICE = cursor.Ids(KEY, "alice", ())


@given(st.dictionaries(st.integers(0, cursor.MAX_PARTITIONS - 1), st.integers(0, 2**62), max_size=64))
def test_an_id_names_exactly_the_offsets_it_was_made_of(offsets: dict[int, int]) -> None:
    text = ALICE.encode(offsets)
    assert text.startswith("c2.") and "\n" not in text and len(text) <= cursor.MAX_CHARS
    assert ALICE.decode(text) == cursor.Resume(offsets, same_groups=True)


@pytest.mark.parametrize("bad", ["", "events:0:1", "c1.", "c1.!!", "c1.AQ", "c1.AQAA", "c1.AQCA", "c1.AQAAAA",
                                 "c2.", "c2.AQAA", "c2.AQAA.", "c2.!!.AA", ALICE.encode({0: 1}) + "AA",
                                 "c3." + ALICE.encode({0: 1})[3:], "c2." + "A" * (cursor.MAX_CHARS + 1)])
def test_an_id_it_did_not_give_out_is_refused(bad: str) -> None:
    with pytest.raises(cursor.BadCursor):
        ALICE.decode(bad)


def test_an_id_is_only_accepted_from_the_principal_it_was_given_to_and_cannot_be_edited() -> None:
    """Break caught: leaving the principal out of the MAC (``b"id\\0" + b"\\0"``) lets bob resume from alice's id; not
    checking the MAC accepts the edited offset."""
    text = ALICE.encode({0: 5, 3: 70})
    with pytest.raises(cursor.BadCursor):
        cursor.Ids(KEY, "bob", ()).decode(text)
    with pytest.raises(cursor.BadCursor):  # same principal, another deployment's key
        cursor.Ids(cursor.key_of("another secret"), "alice", ()).decode(text)
    body, mac = text[3:].split(".")
    edited = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    edited[-1] = 0  # partition 3 from offset 0: everything it holds
    forged = "c2." + base64.urlsafe_b64encode(bytes(edited)).rstrip(b"=").decode() + "." + mac
    with pytest.raises(cursor.BadCursor):
        ALICE.decode(forged)
    assert cursor.Ids(KEY, "alice", ("finance",)).decode(text) == cursor.Resume({0: 5, 3: 70}, same_groups=False)
    assert cursor.Ids(KEY, "alice", ("b", "a")).decode(cursor.Ids(KEY, "alice", ("a", "b")).encode({})).same_groups


def test_the_cursor_lets_through_only_what_is_not_behind_it() -> None:
    c = cursor.Cursor({0: 5, 1: 0}, ALICE)
    assert not c.wants(0, 4) and c.wants(0, 5) and c.wants(1, 0) and c.wants(2, 0)
    resumed = ALICE.decode(c.after(0, 5)).offsets
    assert resumed == {0: 6, 1: 0}
    assert not cursor.Cursor(resumed, ALICE).wants(0, 5)


# -- roles ---------------------------------------------------------------------------------------------------------

def test_roles_fold_like_decide() -> None:
    r = roles_after(None, ev("x", 1, EventType.CREATED))
    assert r == Roles("alice", version=1) and r.may_read("alice") and not r.may_read("bob")
    r = roles_after(r, ev("x", 2, EventType.READER_GRANTED, reader="bob"))
    r = roles_after(r, ev("x", 3, EventType.EDITOR_GRANTED, editor="group:ops"))
    assert r.may_read("bob") and r.may_read("carol", ("ops",)) and not r.may_read("carol", ("dev",))
    r = roles_after(r, ev("x", 4, EventType.READER_REVOKED, reader="bob"))
    r = roles_after(r, ev("x", 5, EventType.DELETED))
    assert not r.may_read("bob") and r.may_read("carol", ("ops",)) and r.deleted and r.version == 5


class Source:
    """Roles before an event as a fixed answer, counting the lookups; ``None`` = unknown."""

    def __init__(self, roles: Roles | None | str) -> None:
        self.roles, self.asked = roles, 0

    def roles_before(self, object_id: str, topic: str, partition: int, offset: int) -> Roles | None:
        self.asked += 1
        if self.roles == "unknown":
            raise RolesUnknown("not in time")
        assert not isinstance(self.roles, str)
        return self.roles


def test_the_book_seeds_only_what_it_cannot_fold() -> None:
    src = Source(Roles("alice", readers=frozenset({"bob"}), version=6))
    book = RolesBook(src, "events", max_objects=1)
    before, after = book.observe(ev("x", 7, EventType.UPDATED), 0, 70)
    assert src.asked == 1 and before is not None and before.may_read("bob") and after.may_read("bob")
    book.observe(ev("x", 8, EventType.READER_REVOKED, reader="bob"), 0, 71)
    assert src.asked == 1  # folded, not looked up
    book.observe(ev("y", 1, EventType.CREATED), 0, 72)  # a creation needs no lookup; evicts x (max_objects=1)
    assert src.asked == 1 and len(book) == 1
    book.observe(ev("x", 9, EventType.UPDATED), 0, 73)
    assert src.asked == 2  # evicted: seeded again
    book.observe(ev("x", 12, EventType.UPDATED), 0, 90)
    assert src.asked == 3  # a gap in its versions: seeded again, never folded across it
    with pytest.raises(RolesUnknown):  # a trail without its earlier events: an error, never "owner only"
        RolesBook(Source(None), "events").observe(ev("x", 2, EventType.UPDATED), 0, 1)


# -- the feed's filter ---------------------------------------------------------------------------------------------

def feed_with(roles: Roles | None | str, queue: int = 100, queue_bytes: int = 1 << 30,
              total_bytes: int = 1 << 30) -> ChangeFeed:
    return ChangeFeed("unused:9092", "events", Source(roles), max_subscribers=3, max_per_principal=2,
                      max_queue=queue, retry_after_s=2, max_queue_bytes=queue_bytes, max_total_bytes=total_bytes)


def attach(feed: ChangeFeed, principal: str, object_id: str | None = None,
           groups: tuple[str, ...] = ()) -> Subscriber:
    sub = feed.subscriber(principal, groups, object_id)
    with feed._lock:  # what ``attach`` does, without a running loop
        (feed._all if object_id is None else feed._by_object.setdefault(object_id, [])).append(sub)
    return sub


def kinds(sub: Subscriber) -> list[tuple[str, int]]:
    return [(i.kind, i.offset) for i in sub.queue]


def test_each_subscriber_gets_only_what_it_may_read_and_is_told_when_access_ends() -> None:
    feed = feed_with(Roles("alice", readers=frozenset({"bob", "group:ops"}), version=1))
    alice, bob, eve, carol = attach(feed, "alice"), attach(feed, "bob", "x"), attach(feed, "eve"), \
        attach(feed, "carol", groups=("ops",))
    other = attach(feed, "alice", "y")
    for offset, e in enumerate([ev("x", 2, EventType.UPDATED, patch='{"a":1}'),
                                ev("x", 3, EventType.READER_REVOKED, reader="bob"),
                                ev("x", 4, EventType.UPDATED, patch='{"a":2}'),
                                ev("x", 5, EventType.READER_REVOKED, reader="group:ops"),
                                ev("z", 1, EventType.CREATED, owner="eve")]):
        feed._handle(0, 10 + offset, codec.encode_event(e))
    assert kinds(alice) == [("change", 10), ("change", 11), ("change", 12), ("change", 13)]
    assert kinds(bob) == [("change", 10), ("access-revoked", 11)]
    assert kinds(carol) == [("change", 10), ("change", 11), ("change", 12), ("access-revoked", 13)]
    assert kinds(eve) == [("change", 14)]  # her own object; nothing of alice's
    assert kinds(other) == []
    assert feed.positions() == {0: 15}
    feed._handle(0, 15, b"garbage")  # undecodable: handed to nobody, the position moves on
    assert feed.positions() == {0: 16} and feed.undecodable == 1 and len(alice.queue) == 4


def test_a_full_queue_cuts_the_subscriber_off_and_unknown_roles_end_streams() -> None:
    feed = feed_with(Roles("alice", version=1), queue=2)
    slow = attach(feed, "alice")
    for offset in range(4):
        feed._handle(0, offset, codec.encode_event(ev("x", 2 + offset, EventType.UPDATED, patch="{}")))
    assert [(i.kind, i.data) for i in slow.queue] == [("reset", b"SLOW_CONSUMER")]  # its queue dropped at once
    blind = feed_with("unknown")
    sub = attach(blind, "alice")
    blind._handle(0, 0, codec.encode_event(ev("x", 2, EventType.UPDATED, patch="{}")))
    assert [(i.kind, i.data) for i in sub.queue] == [("reset", b"ROLES_UNKNOWN")]


def _item(n: int, offset: int = 0) -> FeedItem:
    return FeedItem("change", 0, offset, b"x" * n)


def test_a_queue_is_bounded_in_bytes_at_the_bound_and_one_past_it() -> None:
    """Items of 100 + 50 bytes fit a 150-byte queue; one more byte cuts it off, its queue and bytes dropped at once.
    Breaks caught: ``>`` made ``>=`` (cut at the bound), the ``queue.clear()`` of a cut left out (the dropped events
    stay pinned until the client reads them)."""
    feed = feed_with(None, queue_bytes=150, total_bytes=10_000)
    at = attach(feed, "alice")
    feed._deliver(at, _item(100, 0))
    feed._deliver(at, _item(50, 1))
    assert not at.cut and at.queued == 150 and feed.budget.used == 150 and len(at.queue) == 2
    past = attach(feed, "bob")
    feed._deliver(past, _item(100, 0))
    feed._deliver(past, _item(51, 1))
    assert past.cut and [(i.kind, i.data) for i in past.queue] == [("reset", b"SLOW_CONSUMER")]
    assert past.queued == 0 and feed.budget.used == 150  # bob's 100 bytes went back at once
    assert at.pop() is not None and at.queued == 50 and feed.budget.used == 50  # a read gives its bytes back
    feed.detach(at)
    assert feed.budget.used == 0 and at.cut  # an ended stream's queue goes, and it takes nothing more
    feed._deliver(at, _item(10))
    assert feed.budget.used == 0


def test_the_process_total_is_bounded_in_bytes_and_the_biggest_queue_is_cut() -> None:
    """Two streams share a 300-byte budget: filled to exactly 300 nobody is cut; one byte more cuts the stream
    holding the most (the slow one), and the event goes to the stream it was for. Breaks caught: ``used + n >
    max_bytes`` made ``>=``; cutting the receiving stream instead of the biggest (``hog = sub``)."""
    feed = feed_with(None, queue_bytes=1000, total_bytes=300)
    slow, fast = attach(feed, "alice"), attach(feed, "bob")
    feed._deliver(slow, _item(200, 0))
    feed._deliver(fast, _item(100, 0))
    assert not slow.cut and not fast.cut and feed.budget.used == 300
    assert fast.pop() is not None
    feed._deliver(fast, _item(101, 1))
    assert slow.cut and [i.kind for i in slow.queue] == ["reset"] and slow.queued == 0
    assert not fast.cut and fast.queued == 101 and feed.budget.used == 101
    alone = feed_with(None, queue_bytes=1000, total_bytes=50)
    sub = attach(alone, "alice")
    alone._deliver(sub, _item(51))  # bigger than the whole budget: nobody else to cut, so the stream itself
    assert sub.cut and alone.budget.used == 0


def test_a_cut_stream_whose_client_does_not_read_is_closed() -> None:
    """The client stops reading: ``send`` never returns. Once its subscriber is cut, the response ends within
    CUT_GRACE_S all the same (the server closes a response its app left unfinished) and the slot is released.
    Break caught: not starting ``close_when_cut`` (the response waits on the client for ever)."""
    sub = Subscriber("alice", (), None, 10)
    closed: list[bool] = []

    async def content() -> AsyncIterator[bytes]:
        yield b": live\n\n"
        await asyncio.sleep(3600)
        yield b"never"

    async def run() -> float:
        started = asyncio.Event()

        async def send(message: Any) -> None:  # noqa: ANN401 - an ASGI message
            if message["type"] == "http.response.body":
                started.set()
                await asyncio.sleep(3600)  # a client that does not read

        async def receive() -> Any:  # noqa: ANN401
            await asyncio.sleep(3600)

        task = asyncio.create_task(EventStream(content(), lambda: closed.append(True), sub.dropped)(
            {"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send))
        await started.wait()
        t0 = time.monotonic()
        sub.stop("SLOW_CONSUMER")
        await asyncio.wait_for(task, CUT_GRACE_S + 3)
        return time.monotonic() - t0

    took = asyncio.run(run())
    assert CUT_GRACE_S <= took < CUT_GRACE_S + 2 and closed == [True]


def test_subscriber_slots_are_bounded_per_principal_and_per_process() -> None:
    feed = feed_with(None)
    feed.reserve("alice")
    feed.reserve("alice")
    with pytest.raises(ApiError) as per_principal:
        feed.reserve("alice")
    assert per_principal.value.code == "TOO_MANY_SUBSCRIPTIONS"
    feed.reserve("bob")
    with pytest.raises(ApiError) as per_process:
        feed.reserve("carol")
    assert per_process.value.code == "TOO_MANY_SUBSCRIBERS" and per_process.value.headers == {"Retry-After": "2"}
    feed.release("alice")
    feed.reserve("carol")
    assert feed.subscribers == 3


def test_a_live_stream_ends_on_a_reset_with_the_id_to_resume_from() -> None:
    feed = feed_with(Roles("alice", version=1))
    feed._positions = {0: 10, 1: 3}
    plan = Plan("alice", (), None, [0, 1], None, {}, expires_at=2e9, heartbeat_s=60, ids=ALICE)

    async def run() -> list[bytes]:
        gen = events(plan, feed, feed.subscriber("alice", (), None), None, RolesBook(feed.book.source, "events"),
                     None)
        out = [await gen.__anext__()]  # attached: the live phase has begun
        sub = feed._all[0]
        feed._handle(0, 10, codec.encode_event(ev("x", 2, EventType.UPDATED, patch="{}")))
        out.append(await gen.__anext__())
        feed._handle(0, 11, codec.encode_event(ev("x", 3, EventType.UPDATED, patch="{}")))
        sub.stop("SHUTDOWN")  # the queued version 3 is dropped: the reset's id is the one after version 2
        out += [chunk async for chunk in gen]
        assert feed._all == []  # detached when it ended
        return out

    live, change, reset = asyncio.run(run())
    assert live == b": live\n\n"
    head, _, data = change.partition(b"event: change\ndata: ")
    assert ALICE.decode(head.decode().removeprefix("id: ").strip()).offsets == {0: 11, 1: 3}
    assert b'"version":2' in data and b'"patch":{}' in data
    assert reset.startswith(b"event: reset\ndata: ") and b'"code":"SHUTDOWN"' in reset
    assert ALICE.encode({0: 11, 1: 3}).encode() in reset


def test_roles_are_seeded_from_the_audit_trail_below_the_event(tmp_path: Path) -> None:
    """The audit store written by the real audit projection: roles before an event are the fold of the object's
    events at lower offsets of its partition (later ones, other partitions and other objects left out)."""
    proj = AuditProjection(tmp_path / "audit", sync=False)
    history = [(0, ev("x", 1, EventType.CREATED, document="{}")), (1, ev("y", 1, EventType.CREATED, document="{}")),
               (2, ev("x", 2, EventType.READER_GRANTED, reader="bob")),
               (3, ev("x", 3, EventType.EDITOR_GRANTED, editor="carol")),
               (4, ev("x", 4, EventType.READER_REVOKED, reader="bob"))]
    proj.apply([Item(Record("events", 3, o, e.object_id.encode(), codec.encode_event(e), 0), e) for o, e in history])
    roles = AuditRoles(tmp_path / "audit", wait_s=0.0)
    try:
        assert roles.roles_before("x", "events", 3, 4) == Roles("alice", frozenset({"carol"}), frozenset({"bob"}),
                                                               version=3)
        assert roles.roles_before("x", "events", 3, 1) == Roles("alice", version=1)
        assert roles.roles_before("x", "events", 3, 0) is None
        assert roles.roles_before("x", "events", 2, 0) is None  # another partition holds none of it
        with pytest.raises(RolesUnknown):  # not stored that far yet: never a guess
            roles.roles_before("x", "events", 3, 9)
    finally:
        roles.close()
        proj.close()
