"""One subscriber's stream: catch-up from its ``Last-Event-ID`` (read from the topic), then the live feed.

Catch-up reads each followed partition from the resumed offsets up to the high watermarks found when the stream
opened, without holding a live slot in the feed; then the stream attaches to the feed, reads what was written in
between (up to the offsets ``attach`` returned) and goes live. Every record is let through only if it is not
behind the stream's cursor, so nothing is sent twice, and each step starts where the last ended, so nothing is
skipped. Each ``change`` and ``access-revoked`` frame's id is the cursor just past its record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.api.changes import frames
from app.api.changes.current import CurrentAccess
from app.api.changes.cursor import Cursor, Ids
from app.api.changes.fanout import ChangeFeed, Subscriber
from app.api.changes.reader import Expired, RangeReader
from app.api.changes.roles import RolesBook, RolesUnknown
from commands import Event, EventType
from commands.access import Roles

#: How often an idle stream looks at its client and its token's expiry.
TICK_S = 1.0
#: How long a stream the feed cut off (its queue dropped) may take to write its ``reset`` before its connection is
#: closed: a client that stopped reading does not hold the connection (or anything queued) any longer.
CUT_GRACE_S = 1.0


@dataclass
class Plan:
    """What one stream follows and from where (``resume`` None: from now on).

    ``same_groups``: the caller's groups are those it had when it was given the resumed id (``cursor.Resume``).
    ``finite``: nothing will follow the catch-up (a deleted object): the stream ends there instead of going live.
    """

    principal: str
    groups: tuple[str, ...]
    object_id: str | None
    partitions: list[int]
    resume: dict[int, int] | None
    ends: dict[int, int]
    expires_at: float
    heartbeat_s: float
    ids: Ids
    same_groups: bool = True
    finite: bool = False


def _ends_stream(kind: str, event: Event | None, plan: Plan) -> bool:
    # a stream of one object ends when access to it ends, or with the object (ids are never reused)
    return plan.object_id is not None and (kind == "access-revoked" or
                                          (event is not None and event.type is EventType.DELETED))


Observed = tuple[int, int, Event, Roles | None, Roles]


class _Catchup:
    """Turns records read from the topic into frames: the roles at each event folded with the stream's own roles
    book (``observe``, on a worker thread), then what the caller may get of the past decided (``frames``).

    The past goes only to a caller who may read the object now (``CurrentAccess``, as its history answers):
    every event of it is a ``change``, as its history serves every event to its readers. For an object the caller
    may not read now, the only frame is ``access-revoked`` where its access ended — judged by its principal, or
    by its groups only if they are those it had when it was given its id (a newcomer to a group is never told of
    objects shared with the group and revoked before it joined). An event newer than the read model's view is
    decided as the live feed decides it (the roles folded up to the event)."""

    def __init__(self, plan: Plan, cursor: Cursor, book: RolesBook, access: CurrentAccess) -> None:
        self.plan, self.cursor, self.book, self.access = plan, cursor, book, access
        self.finished = False
        self._then = plan.groups if plan.same_groups else ()

    def observe(self, records: list[tuple[int, int, Event | None]]) -> list[Observed]:
        out: list[Observed] = []
        plan = self.plan
        for p, o, event in records:
            if event is None or not self.cursor.wants(p, o):
                continue
            if plan.object_id is not None and event.object_id != plan.object_id:
                continue
            before, after = self.book.observe(event, p, o)
            out.append((p, o, event, before, after))
        return out

    def _kind(self, event: Event, before: Roles | None, after: Roles) -> str | None:
        principal, groups, then = self.plan.principal, self.plan.groups, self._then
        now = self.access.readable(event.object_id, event.version)
        if now:
            return "change"
        if now is None and after.may_read(principal, groups):
            return "change"
        if before is not None and before.may_read(principal, then) and not after.may_read(principal, then):
            return "access-revoked"
        return None

    async def frames(self, observed: list[Observed]) -> list[bytes]:
        await self.access.learn((e.object_id, e.version) for _, _, e, _, _ in observed)
        out: list[bytes] = []
        for p, o, event, before, after in observed:
            if self.finished:
                break
            kind = self._kind(event, before, after)
            if kind is None:
                continue
            data = frames.event_data(event) if kind == "change" else frames.revoked_data(event)
            out.append(frames.frame(kind, data, self.cursor.after(p, o)))
            if _ends_stream(kind, event, self.plan):
                self.finished = True
        return out


def _reset_detail(code: str) -> str:
    return {
        "SLOW_CONSUMER": "the client read too slowly and its queue filled; resume with Last-Event-ID",
        "ROLES_UNKNOWN": "who may read an object could not be learnt in time (the audit projection is behind or "
                         "not running); resume with Last-Event-ID",
        "CHANGES_EXPIRED": "events after Last-Event-ID were deleted by the topic's retention; start again without "
                           "Last-Event-ID (and read the current state)",
        "TOKEN_EXPIRED": "the bearer token expired; resume with a fresh token and Last-Event-ID",
        "SHUTDOWN": "the API process is stopping; resume with Last-Event-ID",
        "FEED_ERROR": "the API process's change feed failed; resume with Last-Event-ID",
    }.get(code, "resume with Last-Event-ID")


async def _catch_up(catchup: _Catchup, feed: ChangeFeed, sub: Subscriber, reader: RangeReader) -> AsyncIterator[bytes]:
    """Yield the catch-up's frames (and heartbeats); a final ``reset`` (token expired, cut off) sets ``finished``.
    Raises ``Expired`` and ``RolesUnknown`` for ``events`` to answer."""
    plan, cursor = catchup.plan, catchup.cursor
    last_write = time.monotonic()
    # 1: up to the ends found at the start, not yet attached (live items would pile up meanwhile)
    # 2: attached, up to where the feed starts handing on (a finite stream needs no live items)
    for attach in (False,) if plan.finite else (False, True):
        ends = feed.attach(sub) if attach else plan.ends
        await run_in_threadpool(reader.assign, {p: cursor.offsets[p] for p in plan.partitions},
                                {p: ends.get(p, 0) for p in plan.partitions})
        while not reader.done and not catchup.finished:
            if time.time() >= plan.expires_at:  # checked before each batch: nothing goes out after it
                catchup.finished = True
                yield frames.reset("TOKEN_EXPIRED", _reset_detail("TOKEN_EXPIRED"), cursor.id())
                return
            if sub.cut:  # cut off while catching up (attached): its reset now, not after the catch-up
                item = sub.pop()
                code = item.data.decode() if item is not None else "SHUTDOWN"
                catchup.finished = True
                yield frames.reset(code, _reset_detail(code), cursor.id())
                return
            out = await catchup.frames(await run_in_threadpool(lambda: catchup.observe(reader.read())))
            for chunk in out:
                yield chunk
            now = time.monotonic()
            if out:
                last_write = now
            elif now - last_write >= plan.heartbeat_s:
                yield frames.HEARTBEAT
                last_write = now
        if catchup.finished:
            return


async def events(plan: Plan, feed: ChangeFeed, sub: Subscriber, reader: RangeReader | None, book: RolesBook,
                 access: CurrentAccess | None) -> AsyncIterator[bytes]:
    """Yield the stream's frames until the client leaves, access ends, or the stream is cut (a final ``reset``)."""
    cursor = Cursor(plan.resume or {}, plan.ids)
    last_write = time.monotonic()
    try:
        if plan.resume is not None and reader is not None and access is not None:
            catchup = _Catchup(plan, cursor, book, access)
            try:
                async for chunk in _catch_up(catchup, feed, sub, reader):
                    yield chunk
            except Expired:  # retention deleted what the catch-up still needed (at an assign or a read)
                yield frames.reset("CHANGES_EXPIRED", _reset_detail("CHANGES_EXPIRED"), cursor.id())
                return
            except RolesUnknown:
                yield frames.reset("ROLES_UNKNOWN", _reset_detail("ROLES_UNKNOWN"), cursor.id())
                return
            if catchup.finished or plan.finite:
                return
            await run_in_threadpool(reader.close)  # live from here: the catch-up's consumer is not needed
            yield b": live\n\n"
        else:
            start = feed.attach(sub)
            cursor = Cursor({p: start.get(p, 0) for p in plan.partitions}, plan.ids)
            yield b": live\n\n"  # headers and a first byte now: the client knows it is subscribed
        while True:
            sub.wake.clear()
            while True:
                if time.time() >= plan.expires_at:  # before each frame: a stream never outlives its token
                    yield frames.reset("TOKEN_EXPIRED", _reset_detail("TOKEN_EXPIRED"), cursor.id())
                    return
                if (item := sub.pop()) is None:
                    break
                if item.kind == "reset":
                    code = item.data.decode()
                    yield frames.reset(code, _reset_detail(code), cursor.id())
                    return
                if not cursor.wants(item.partition, item.offset):
                    continue
                yield frames.frame(item.kind, item.data, cursor.after(item.partition, item.offset))
                last_write = time.monotonic()
                if _ends_stream(item.kind, item.event, plan):
                    return
            try:
                await asyncio.wait_for(sub.wake.wait(), TICK_S)
            except TimeoutError:  # leaving clients are seen by ``EventStream``, which cancels this generator
                if time.monotonic() - last_write >= plan.heartbeat_s:
                    yield frames.HEARTBEAT
                    last_write = time.monotonic()
    finally:
        feed.detach(sub)


class EventStream(StreamingResponse):
    """``text/event-stream`` that always watches for the client leaving (whatever the server's ASGI version), is
    closed ``CUT_GRACE_S`` after its subscriber is cut off (``dropped``) even if the client does not read its
    ``reset``, and runs ``on_close`` once when the response ends, however it ends."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None],
                 dropped: asyncio.Event | None = None, status_code: int = 200) -> None:
        super().__init__(content, status_code=status_code,
                         headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._on_close = on_close
        self._dropped = dropped

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client is gone
                        pass
                    tg.cancel_scope.cancel()

                async def close_when_cut(dropped: asyncio.Event) -> None:
                    await dropped.wait()
                    await anyio.sleep(CUT_GRACE_S)
                    tg.cancel_scope.cancel()  # the server closes a response its app left unfinished

                tg.start_soon(stream)
                if self._dropped is not None:
                    tg.start_soon(close_when_cut, self._dropped)
                await self.listen_for_disconnect(receive)
                tg.cancel_scope.cancel()
        finally:
            self._on_close()
