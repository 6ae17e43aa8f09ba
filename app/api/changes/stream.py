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
from app.api.changes.cursor import Cursor
from app.api.changes.fanout import ChangeFeed, Item, Subscriber
from app.api.changes.reader import Expired, RangeReader
from app.api.changes.roles import RolesBook, RolesUnknown
from commands import Event, EventType

#: How often an idle stream looks at its client and its token's expiry.
TICK_S = 1.0


@dataclass
class Plan:
    """What one stream follows and from where (``resume`` None: from now on)."""

    principal: str
    groups: tuple[str, ...]
    object_id: str | None
    partitions: list[int]
    resume: dict[int, int] | None
    ends: dict[int, int]
    expires_at: float
    heartbeat_s: float


def _ends_stream(kind: str, event: Event | None, plan: Plan) -> bool:
    # a stream of one object ends when access to it ends, or with the object (ids are never reused)
    return plan.object_id is not None and (kind == "access-revoked" or
                                          (event is not None and event.type is EventType.DELETED))


class _Catchup:
    """Turns records read from the topic into frames, with the stream's own roles book (on a worker thread)."""

    def __init__(self, plan: Plan, cursor: Cursor, book: RolesBook) -> None:
        self.plan, self.cursor, self.book = plan, cursor, book
        self.finished = False

    def frames(self, records: list[tuple[int, int, Event | None]]) -> list[bytes]:
        out: list[bytes] = []
        plan = self.plan
        for p, o, event in records:
            if self.finished or event is None or not self.cursor.wants(p, o):
                continue
            if plan.object_id is not None and event.object_id != plan.object_id:
                continue
            before, after = self.book.observe(event, p, o)
            if after.may_read(plan.principal, plan.groups):
                kind, data = "change", frames.event_data(event)
            elif before is not None and before.may_read(plan.principal, plan.groups):
                kind, data = "access-revoked", frames.revoked_data(event)
            else:
                continue
            out.append(frames.frame(kind, data, self.cursor.after(p, o)))
            if _ends_stream(kind, event, plan):
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


async def events(plan: Plan, feed: ChangeFeed, reader: RangeReader | None,
                 book: RolesBook) -> AsyncIterator[bytes]:
    """Yield the stream's frames until the client leaves, access ends, or the stream is cut (a final ``reset``)."""
    sub = Subscriber(plan.principal, plan.groups, plan.object_id, feed.max_queue)
    cursor = Cursor(plan.resume or {})
    last_write = time.monotonic()
    try:
        if plan.resume is not None and reader is not None:
            catchup = _Catchup(plan, cursor, book)
            # 1: up to the ends found at the start, not yet attached (live items would pile up meanwhile)
            # 2: attached, up to where the feed starts handing on
            for attach in (False, True):
                ends = feed.attach(sub) if attach else plan.ends
                await run_in_threadpool(reader.assign, {p: cursor.offsets[p] for p in plan.partitions},
                                        {p: ends.get(p, 0) for p in plan.partitions})
                while not reader.done and not catchup.finished:
                    try:
                        out = await run_in_threadpool(lambda: catchup.frames(reader.read()))
                    except Expired:
                        yield frames.reset("CHANGES_EXPIRED", _reset_detail("CHANGES_EXPIRED"), cursor.id())
                        return
                    except RolesUnknown:
                        yield frames.reset("ROLES_UNKNOWN", _reset_detail("ROLES_UNKNOWN"), cursor.id())
                        return
                    for chunk in out:
                        yield chunk
                    now = time.monotonic()
                    if out:
                        last_write = now
                    elif now - last_write >= plan.heartbeat_s:
                        yield frames.HEARTBEAT
                        last_write = now
                    if time.time() >= plan.expires_at:
                        yield frames.reset("TOKEN_EXPIRED", _reset_detail("TOKEN_EXPIRED"), cursor.id())
                        return
                if catchup.finished:
                    return
            await run_in_threadpool(reader.close)  # live from here: the catch-up's consumer is not needed
            yield b": live\n\n"
        else:
            start = feed.attach(sub)
            cursor = Cursor({p: start.get(p, 0) for p in plan.partitions})
            yield b": live\n\n"  # headers and a first byte now: the client knows it is subscribed
        while True:
            sub.wake.clear()
            while sub.queue:
                item: Item = sub.queue.popleft()
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
            if time.time() >= plan.expires_at:
                yield frames.reset("TOKEN_EXPIRED", _reset_detail("TOKEN_EXPIRED"), cursor.id())
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
    """``text/event-stream`` that always watches for the client leaving (whatever the server's ASGI version) and
    runs ``on_close`` once when the response ends, however it ends."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(content, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as tg:
                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client is gone
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                await self.listen_for_disconnect(receive)
                tg.cancel_scope.cancel()
        finally:
            self._on_close()
