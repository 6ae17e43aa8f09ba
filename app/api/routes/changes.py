"""Change feed routes: ``GET /changes`` (every object the caller may read) and ``GET /objects/{id}/changes``, SSE."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Request, Response
from pydantic import AfterValidator
from starlette.concurrency import run_in_threadpool

from app.api.changes.current import CurrentAccess
from app.api.changes.cursor import BadCursor, Ids, Resume, key_of
from app.api.changes.fanout import ChangeFeed
from app.api.changes.reader import RangeReader
from app.api.changes.roles import RolesBook
from app.api.changes.stream import EventStream, Plan, events
from app.api.deps import ReaderDep, ReadModelDep, _read_model, caller_of
from app.api.models import OBJECT_ID_PATTERN
from app.api.problems import PROBLEM_RESPONSES, RATE_LIMITED_RESPONSE, ApiError
from app.api.routes.objects import _unknown
from app.api.writes.submit import refuse_reserved
from app.validator.murmur2 import partition_for
from commands.access import may_read

router = APIRouter(tags=["changes"])

LastEventId = Annotated[str, Header(alias="Last-Event-ID", description=(
    "The `id` of the last frame received: the stream resumes right after it, every event exactly once. "
    "Without it the stream starts at the events written from now on. An id is accepted only from the principal "
    "it was given to (400 INVALID_CURSOR otherwise)."))]

_STREAM_DOC = """\
Server-Sent Events. Frames: `change` (data: the event as JSON: object_id, type, version, event_id, command_id,
principal, occurred_at, owner, and document / patch / editor / reader as the type has them), `access-revoked`
(data: object_id, version: the caller may no longer read that object), and a final `reset` (data: code, detail,
resume_from) when the server ends the stream: SLOW_CONSUMER, ROLES_UNKNOWN, CHANGES_EXPIRED, TOKEN_EXPIRED,
SHUTDOWN or FEED_ERROR. Each `change` and `access-revoked` frame's `id` is opaque and bound to the caller: send
the last one back as `Last-Event-ID` to resume. A `change` whose document or patch JSON cannot say (NaN) carries
`error: UNSERVABLE_DOCUMENT` instead of them. Comment lines (`: keepalive`) keep an idle connection open."""

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}, "description": _STREAM_DOC},
    400: PROBLEM_RESPONSES[401] | {"description": "INVALID_CURSOR: a Last-Event-ID this API did not give to this "
                                   "caller"},
    401: PROBLEM_RESPONSES[401],
    410: PROBLEM_RESPONSES[401] | {"description": "CHANGES_EXPIRED: events after Last-Event-ID are no longer kept"},
    **RATE_LIMITED_RESPONSE,
    503: PROBLEM_RESPONSES[503] | {"description": "TOO_MANY_SUBSCRIBERS (this process's streams), or the broker "
                                   "or the read model cannot be reached"},
}
_RESPONSES[429] = _RESPONSES[429] | {"description": "RATE_LIMITED (reads), or TOO_MANY_SUBSCRIPTIONS: the "
                                     "principal holds ARBITER_CHANGES_MAX_PER_PRINCIPAL streams on this process"}


def _ids(request: Request) -> Ids:
    caller = caller_of(request)
    return Ids(key_of(request.app.state.settings.auth_secret.get_secret_value()), caller.principal, caller.groups)


def _resume(ids: Ids, last_event_id: str | None) -> Resume | None:
    if last_event_id is None:
        return None
    try:
        return ids.decode(last_event_id)
    except BadCursor as e:
        raise ApiError(e.message, code="INVALID_CURSOR") from e


async def _open(request: Request, principal: str, object_id: str | None, ids: Ids, resumed: Resume | None, *,
                read_model: Any = None, finite: bool = False) -> Response:  # noqa: ANN401 - a read model
    state = request.app.state
    settings = state.settings
    feed: ChangeFeed = state.changes
    caller = caller_of(request)
    resume = resumed.offsets if resumed is not None else None
    if resume is not None and read_model is None:
        read_model = await _read_model(request)
    feed.reserve(principal)
    reader: RangeReader | None = None
    try:
        try:
            await run_in_threadpool(feed.start)
        except Exception as e:  # noqa: BLE001 - whatever librdkafka raised: the broker is not reachable now
            raise ApiError(f"the events topic cannot be read now ({type(e).__name__}: {e})", code="BROKER_UNAVAILABLE",
                           headers={"Retry-After": str(settings.retry_after_s)}) from e
        partitions = sorted(feed.positions())
        if object_id is not None:  # an object's events are all on the partition its id is keyed to
            partitions = [partition_for(object_id.encode(), len(partitions))]
        ends: dict[int, int] = {}
        if resume is not None:
            reader = RangeReader(settings.kafka_bootstrap, settings.topic_events, settings.kafka_config)
            marks = await run_in_threadpool(reader.watermarks, partitions)
            # a partition the id does not name (the topic grew since) is read from its first kept event
            resume = {p: resume.get(p, marks[p][0]) for p in partitions}
            lost = [p for p in partitions if resume[p] < marks[p][0]]
            if lost:
                raise ApiError(f"events after Last-Event-ID are no longer kept on partition(s) {lost} (retention); "
                               "start again without Last-Event-ID", code="CHANGES_EXPIRED")
            ends = {p: marks[p][1] for p in partitions}
    except BaseException:
        feed.release(principal)
        if reader is not None:
            reader.close()
        raise
    plan = Plan(principal, caller.groups, object_id, partitions, resume, ends, caller.expires_at,
                settings.changes_heartbeat_s, ids, resumed.same_groups if resumed is not None else True, finite)
    book = RolesBook(feed.book.source, settings.topic_events, settings.changes_roles_cache)
    access = CurrentAccess(read_model, principal, caller.groups, settings.changes_roles_cache) \
        if resume is not None else None
    sub = feed.subscriber(principal, caller.groups, object_id)
    released = False

    def on_close() -> None:
        nonlocal released
        if not released:
            released = True
            feed.release(principal)
            if reader is not None:
                reader.close()

    content = events(plan, feed, sub, reader, book, access)
    if finite:  # a deleted object: 204 if nothing of it follows the id (EventSource stops), else its last frames
        first = await _first_frame(content)
        if first is None:
            on_close()
            return Response(status_code=204, headers={"Cache-Control": "no-store"})
        content = _chain(first, content)
    return EventStream(content, on_close, sub.dropped)


async def _first_frame(content: AsyncIterator[bytes]) -> list[bytes] | None:
    """Read ``content`` up to its first frame (comments before it kept); None if it ends without one."""
    head: list[bytes] = []
    async for chunk in content:
        head.append(chunk)
        if not chunk.startswith(b":"):
            return head
    return None


async def _chain(head: list[bytes], rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in head:
        yield chunk
    async for chunk in rest:
        yield chunk


@router.get("/changes", summary="Live changes of every object the caller may read (Server-Sent Events)",
            response_class=EventStream, status_code=200, responses=_RESPONSES)
async def all_changes(request: Request, principal: ReaderDep, last_event_id: LastEventId = None) -> Response:
    ids = _ids(request)
    return await _open(request, principal, None, ids, _resume(ids, last_event_id))


@router.get("/objects/{object_id}/changes", summary="Live changes of one object (Server-Sent Events)",
            response_class=EventStream, status_code=200,
            responses={**_RESPONSES, 204: {"description": "Resumed with a Last-Event-ID at or past the object's "
                                           "DELETED change: nothing more will come (EventSource stops on 204)"},
                       404: PROBLEM_RESPONSES[401] | {
                "description": "Unknown object, or one the caller may not read (the same answer)"},
                410: PROBLEM_RESPONSES[401] | {"description": "DELETED (without Last-Event-ID: nothing more will "
                                               "happen to it), or CHANGES_EXPIRED"}})
async def object_changes(request: Request, object_id: Annotated[str, Path(pattern=OBJECT_ID_PATTERN),
                                                                  AfterValidator(refuse_reserved)],
                         principal: ReaderDep, read_model: ReadModelDep, last_event_id: LastEventId = None) -> Response:
    ids = _ids(request)
    resume = _resume(ids, last_event_id)
    get = getattr(read_model, "lookup", read_model.get)
    view = await run_in_threadpool(get, object_id) if getattr(read_model, "blocking", False) else get(object_id)
    if view is None or not may_read(principal, view.owner, view.editors, view.readers, caller_of(request).groups):
        raise _unknown(object_id)
    if view.deleted and resume is None:
        raise ApiError(f"object {object_id!r} was deleted at version {view.version}", code="DELETED",
                       headers={"ETag": f'"{view.version}"'})
    return await _open(request, principal, object_id, ids, resume, read_model=read_model, finite=view.deleted)
