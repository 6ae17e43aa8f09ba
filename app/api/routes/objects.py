"""Object routes: create, merge-patch, delete, grant/revoke editors and readers (commands) and read (the read model)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response
from pydantic import AfterValidator
from starlette.concurrency import run_in_threadpool

from app.api.callers.auth import PRINCIPAL_PATTERN
from app.api.deps import ApiContext, ContextDep, ObjectViewLike, PrincipalDep, ReaderDep, ReadModelDep, caller_of
from app.api.http.json_body import StrictJsonRoute
from app.api.models import (
    IDEMPOTENCY_KEY_PATTERN,
    OBJECT_ID_PATTERN,
    CommandDecided,
    CommandQueued,
    CreateRequest,
    Document,
)
from app.api.problems import PROBLEM_RESPONSES, RATE_LIMITED_RESPONSE, ApiError
from app.api.reads import json_out
from app.api.reads.cursors import cursor_signer
from app.api.reads.history import EventPage, ObjectPage, RoleName, event_page, object_page, page_events
from app.api.reads.position import HEADER, MIN_HEADER, PositionWatch, parse_min_positions
from app.api.writes.submit import (
    IF_MATCH_PATTERN,
    command_id,
    create_command,
    delete_command,
    expected_version,
    for_caller,
    now,
    prefer_wait,
    refuse_reserved,
    submit,
    update_command,
)
from app.limits import OWN_REJECTIONS_PER_PAGE
from commands import (
    Command,
    GrantEditor,
    GrantReader,
    RevokeEditor,
    RevokeReader,
)
from commands.access import may_read
from projections.db.history import fold
from projections.db.lists import BadCursor, Role, grantees, micros

router = APIRouter(prefix="/objects", tags=["objects"], route_class=StrictJsonRoute)
#: What GET serves: RFC 8259 only (no NaN/Infinity; a lone surrogate fails the UTF-8 encode).
_strict_json = json_out.encode  # the one JSON rule of every way a document leaves the API

#: An object id in the path; one in the reserved namespace is refused ``RESERVED_ID`` (``submit.refuse_reserved``).
ObjectIdPath = Annotated[str, Path(pattern=OBJECT_ID_PATTERN), AfterValidator(refuse_reserved)]
GranteePath = Annotated[str, Path(pattern=PRINCIPAL_PATTERN)]
# Typed ``str`` with a None default (not ``str | None``) so the OpenAPI document says "string", not "string or null".
IdempotencyKey = Annotated[str, Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_PATTERN,
                                              description="Becomes the command id; reuse it when retrying.")]
IfMatch = Annotated[str, Header(alias="If-Match", pattern=IF_MATCH_PATTERN,
                                       description='Expected version as a strong ETag: "<version>".')]
Prefer = Annotated[str, Header(alias="Prefer", description="`wait=<seconds>` (RFC 7240) waits for the decision.")]

#: The headers of a write answered with its decision (``Prefer: wait``).
_DECIDED_HEADERS = {
    "ETag": {"description": 'The version the command produced: "<version>"', "schema": {"type": "string"}},
    HEADER: {"description": "Where the decision's event is on the events topic, `events:<partition>:<offset>`; "
                            f"send it back in {MIN_HEADER} to read this write (absent when unknown)",
             "schema": {"type": "string", "pattern": r"^events:[0-9]+:[0-9]+$"}},
}
_DECIDED = {"model": CommandDecided, "headers": _DECIDED_HEADERS}

_WRITE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **PROBLEM_RESPONSES,
    **RATE_LIMITED_RESPONSE,
    202: {"model": CommandQueued, "description": "Durably queued; the outcome will be at Location."},
    403: PROBLEM_RESPONSES[401] | {"description": "FORBIDDEN (after Prefer: wait)"},
    404: PROBLEM_RESPONSES[401] | {"description": "NOT_FOUND (after Prefer: wait)"},
    409: PROBLEM_RESPONSES[401] | {"description": "ALREADY_EXISTS or VERSION_CONFLICT (after Prefer: wait)"},
    410: PROBLEM_RESPONSES[401] | {"description": "DELETED (after Prefer: wait)"},
    412: PROBLEM_RESPONSES[401] | {"description": "VERSION_CONFLICT after If-Match (after Prefer: wait)"},
}


async def _write(request: Request, cmd: Command, ctx: ApiContext, idempotency_key: str | None) -> Response:
    cmd = for_caller(cmd, caller_of(request))  # 403 INSUFFICIENT_SCOPE before anything is produced
    return await submit(cmd, ctx, prefer_wait(request.headers.getlist("prefer"), ctx.settings.wait_max_s),
                        keyed=idempotency_key is not None)



@router.post("", status_code=202, responses={**_WRITE_RESPONSES, 201: _DECIDED},
             summary="Create an object (the client may choose its id)")
async def create_object(request: Request, body: CreateRequest, principal: PrincipalDep, ctx: ContextDep,
                        idempotency_key: IdempotencyKey = None, if_match: IfMatch = None,
                        prefer: Prefer = None) -> Response:
    return await _write(request, create_command(principal, body, idempotency_key, if_match), ctx,
                        idempotency_key)


@router.patch("/{object_id}", status_code=202, responses={**_WRITE_RESPONSES, 200: _DECIDED},
              summary="Apply a JSON merge patch (RFC 7386) to an object")
async def update_object(request: Request, object_id: ObjectIdPath,
                        patch: Annotated[Document, Body(media_type="application/merge-patch+json")],
                        principal: PrincipalDep, ctx: ContextDep, idempotency_key: IdempotencyKey = None,
                        if_match: IfMatch = None, prefer: Prefer = None) -> Response:
    return await _write(request, update_command(principal, object_id, patch, idempotency_key, if_match), ctx,
                        idempotency_key)


@router.delete("/{object_id}", status_code=202,
               responses={**_WRITE_RESPONSES, 204: {"description": "Deleted", "headers": _DECIDED_HEADERS}},
               summary="Delete an object for good")
async def delete_object(request: Request, object_id: ObjectIdPath, principal: PrincipalDep, ctx: ContextDep,
                        idempotency_key: IdempotencyKey = None, if_match: IfMatch = None,
                        prefer: Prefer = None) -> Response:
    return await _write(request, delete_command(principal, object_id, idempotency_key, if_match), ctx,
                        idempotency_key)


async def _editor(request: Request, kind: type[GrantEditor] | type[RevokeEditor], object_id: str, editor: str,
                  principal: str, ctx: ContextDep, idempotency_key: str | None, if_match: str | None) -> Response:
    cmd = kind(command_id(idempotency_key), object_id, principal, now(), expected_version(if_match), editor=editor)
    return await _write(request, cmd, ctx, idempotency_key)


async def _reader(request: Request, kind: type[GrantReader] | type[RevokeReader], object_id: str, reader: str,
                  principal: str, ctx: ContextDep, idempotency_key: str | None, if_match: str | None) -> Response:
    cmd = kind(command_id(idempotency_key), object_id, principal, now(), expected_version(if_match), reader=reader)
    return await _write(request, cmd, ctx, idempotency_key)


@router.put("/{object_id}/editors/{editor}", status_code=202,
            responses={**_WRITE_RESPONSES, 200: _DECIDED}, summary="Let a principal edit an object")
async def grant_editor(request: Request, object_id: ObjectIdPath, editor: GranteePath, principal: PrincipalDep,
                       ctx: ContextDep,
                       idempotency_key: IdempotencyKey = None, if_match: IfMatch = None,
                       prefer: Prefer = None) -> Response:
    return await _editor(request, GrantEditor, object_id, editor, principal, ctx,
                         idempotency_key, if_match)


@router.delete("/{object_id}/editors/{editor}", status_code=202,
               responses={**_WRITE_RESPONSES, 200: _DECIDED},
               summary="Stop a principal from editing an object")
async def revoke_editor(request: Request, object_id: ObjectIdPath, editor: GranteePath, principal: PrincipalDep,
                        ctx: ContextDep,
                        idempotency_key: IdempotencyKey = None, if_match: IfMatch = None,
                        prefer: Prefer = None) -> Response:
    return await _editor(request, RevokeEditor, object_id, editor, principal, ctx,
                         idempotency_key, if_match)


@router.put("/{object_id}/readers/{reader}", status_code=202,
            responses={**_WRITE_RESPONSES, 200: _DECIDED}, summary="Let a principal read an object")
async def grant_reader(request: Request, object_id: ObjectIdPath, reader: GranteePath, principal: PrincipalDep,
                       ctx: ContextDep, idempotency_key: IdempotencyKey = None, if_match: IfMatch = None,
                       prefer: Prefer = None) -> Response:
    return await _reader(request, GrantReader, object_id, reader, principal, ctx, idempotency_key, if_match)


@router.delete("/{object_id}/readers/{reader}", status_code=202,
               responses={**_WRITE_RESPONSES, 200: _DECIDED},
               summary="Stop a principal from reading an object")
async def revoke_reader(request: Request, object_id: ObjectIdPath, reader: GranteePath, principal: PrincipalDep,
                        ctx: ContextDep, idempotency_key: IdempotencyKey = None, if_match: IfMatch = None,
                        prefer: Prefer = None) -> Response:
    return await _reader(request, RevokeReader, object_id, reader, principal, ctx, idempotency_key, if_match)


MinPosition = Annotated[str, Header(alias=MIN_HEADER, description=(
    f"Positions from {HEADER} (`events:<partition>:<offset>`, comma-separated): answer only once the read model "
    "has projected past each, waiting at most ARBITER_MIN_POSITION_WAIT_S."))]


async def _await_positions(request: Request) -> None:
    wanted = parse_min_positions(request.headers.getlist(MIN_HEADER))
    watch: PositionWatch | None = request.app.state.positions
    settings = request.app.state.settings
    if watch is None or not await watch.reached(wanted, settings.min_position_wait_s):
        raise ApiError(f"the read model has not projected up to {MIN_HEADER} within "
                       f"{settings.min_position_wait_s:g} s (ARBITER_MIN_POSITION_WAIT_S); retry",
                       code="POSITION_NOT_REACHED", headers={"Retry-After": str(settings.retry_after_s)})


def _unknown(object_id: str) -> ApiError:
    # The one answer for "no such object" and "not yours to read": same status, body and headers (no ETag).
    return ApiError(f"object {object_id!r} is not in the read model (unknown, or not projected yet)",
                    code="NOT_FOUND")


async def _blocking(read_model: Any, fn: Any, *args: Any) -> Any:  # noqa: ANN401 - a read-model method
    """Call ``fn`` on the threadpool for a network read model (PostgreSQL: a slow or down database never stalls the
    event loop); the embedded one answers in microseconds and is called inline."""
    return await run_in_threadpool(fn, *args) if getattr(read_model, "blocking", False) else fn(*args)


async def _readable(request: Request, object_id: str, principal: str, read_model: Any) -> ObjectViewLike:  # noqa: ANN401
    """Return the object's current view if ``principal`` may read it, else raise the 404 of an unknown id.

    ``lookup`` (both real backends) decodes the document only when it is served: the access check runs on the roles
    alone, so an outsider's 404 costs the same as an unknown id's, whatever the document's size.
    """
    # Positions first, before the object is looked up: the wait depends only on the read model's progress, so an
    # outsider's answer (after the same wait) stays the 404 of an unknown id.
    if request.headers.get(MIN_HEADER) is not None:
        await _await_positions(request)
    view = await _blocking(read_model, getattr(read_model, "lookup", read_model.get), object_id)
    if view is None or not may_read(principal, view.owner, view.editors, view.readers, caller_of(request).groups):
        raise _unknown(object_id)
    return view  # type: ignore[no-any-return]


def _refuse_unserved(object_id: str, view: ObjectViewLike) -> None:
    # Fail closed: the roles above only ever narrow the answer; a document not known to be current is never served.
    if view.stale:
        raise ApiError(f"events of object {object_id!r} are missing from the read model (see its gaps); its view "
                       "is not served until they are projected (arbiter project db --rebuild)", code="VIEW_STALE",
                       headers={"Retry-After": "3600"})
    if view.quarantined:
        raise ApiError(f"an event of object {object_id!r} carried a document the read model cannot hold (see its "
                       "gaps); the document is not served", code="DOCUMENT_QUARANTINED",
                       headers={"Retry-After": "3600"})


_READ_PROBLEMS: dict[int | str, dict[str, Any]] = {
    401: PROBLEM_RESPONSES[401], **RATE_LIMITED_RESPONSE,
    404: PROBLEM_RESPONSES[401] | {"description": "Unknown object, or one the caller may not read"},
    400: PROBLEM_RESPONSES[401] | {"description": "Malformed Arbiter-Min-Position"},
    503: PROBLEM_RESPONSES[503] | {"description": "Read model not open, events of the object are missing "
                                   "(VIEW_STALE), its document could not be applied (DOCUMENT_QUARANTINED), or the "
                                   "read model did not pass Arbiter-Min-Position within ARBITER_MIN_POSITION_WAIT_S "
                                   "(POSITION_NOT_REACHED)"}}


@router.get("", summary="List the objects the caller may read, oldest change first (keyset-paginated)",
            response_model=ObjectPage,
            responses={401: PROBLEM_RESPONSES[401], **RATE_LIMITED_RESPONSE,
                       400: PROBLEM_RESPONSES[401] | {"description": "INVALID_CURSOR: a cursor this API did not hand "
                                                                     "out"},
                       503: PROBLEM_RESPONSES[503] | {"description": "Read model not open"}})
async def list_objects(request: Request, principal: ReaderDep, read_model: ReadModelDep,
                       role: Annotated[RoleName, Query(description="Only objects the caller holds this role on "
                                                       "(itself or through a group); all it may read if absent")] = None,
                       updated_since: Annotated[str, Query(description="ISO 8601: only objects changed at or after "
                                                           "this time", pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}",
                                                           max_length=40)] = None,
                       limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                       cursor: Annotated[str, Query(max_length=400, description="`next_cursor` of the page before")]
                       = None) -> Response:
    """Deleted objects are not listed, nor objects whose events are missing (stale views); a listed object's
    document is read with ``GET /objects/{id}``."""
    try:
        since = micros(updated_since) if updated_since is not None else 0
    except ValueError as e:
        raise ApiError(f"updated_since {updated_since!r} is not an ISO 8601 time", code="INVALID_REQUEST") from e
    cursors = cursor_signer(request.app.state.settings)
    try:
        after = cursors.open(principal, cursor) if cursor is not None else None
    except BadCursor as e:
        raise ApiError(e.message, code="INVALID_CURSOR") from e
    ranges = grantees(principal, caller_of(request).groups, Role(role) if role is not None else None)
    page = await _blocking(read_model, read_model.page, ranges, max(since, 0), after, limit)  # type: ignore[attr-defined]
    return Response(object_page(page, lambda item: cursors.sign(principal, item)), media_type="application/json")


@router.get("/{object_id}/events", summary="Page an object's history: its events, oldest first",
            response_model=EventPage, responses=_READ_PROBLEMS | {
                410: PROBLEM_RESPONSES[401] | {"description": "Deleted object whose history was erased (arbiter erase)"}})
async def object_events(request: Request, object_id: ObjectIdPath, principal: ReaderDep, read_model: ReadModelDep,
                        after_version: Annotated[int, Query(ge=0, le=2**53 - 1)] = 0,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                        include: Annotated[Literal["rejections"], Query(
                            description="`rejections`: also the caller's own rejected commands about the object, "
                                        "with their reason codes")] = None,
                        min_position: MinPosition = None) -> Response:
    """Every event that moved the object's view, with its principal, time and document, patch or grantee. A deleted
    object's history stays readable by its roles until it is erased (then 410); the history of an object whose
    events are missing is not served."""
    view = await _readable(request, object_id, principal, read_model)
    _refuse_unserved(object_id, view)
    if view.deleted:
        await _refuse_erased(object_id, view, read_model)
    entries = await _blocking(read_model, read_model.history, object_id, after_version, limit + 1)  # type: ignore[attr-defined]
    events, more, before = page_events(entries, limit)
    # The caller's own rejections only (an index by principal and object), at most OWN_REJECTIONS_PER_PAGE read, on
    # the threadpool: what any caller can pile up on its own object never runs on the event loop.
    own = await run_in_threadpool(request.app.state.durable_outcomes.rejections, object_id, principal, after_version,
                                  before, limit=OWN_REJECTIONS_PER_PAGE) if include else None
    return Response(event_page(object_id, events, more, after_version, own), media_type="application/json")


@router.get("/{object_id}", summary="Read an object's document from the read model (eventually consistent), or as of "
                                    "a version",
            responses={200: {"content": {"application/json": {"schema": {"type": "object"}}},
                             "description": "The document; ETag is its version"},
                       304: {"description": "If-None-Match matched the current version"},
                       **_READ_PROBLEMS,
                       410: PROBLEM_RESPONSES[401] | {"description": "Deleted object (at that version)"},
                       503: PROBLEM_RESPONSES[503] | {"description": "Read model not open, the stored document "
                                                      "is not RFC 8259 JSON (UNSERVABLE_DOCUMENT), events of the "
                                                      "object are missing (VIEW_STALE), its document could not "
                                                      "be applied (DOCUMENT_QUARANTINED), or the read model did "
                                                      "not pass Arbiter-Min-Position within "
                                                      "ARBITER_MIN_POSITION_WAIT_S (POSITION_NOT_REACHED)"}})
async def read_object(request: Request, object_id: ObjectIdPath, principal: ReaderDep, read_model: ReadModelDep,
                      if_none_match: Annotated[str, Header(alias="If-None-Match")] = None,
                      min_position: MinPosition = None,
                      version: Annotated[int, Query(ge=1, le=2**53 - 1, description=(
                          "The document as of this version: the object's history folded up to it, as the read "
                          "model folded it (404 VERSION_NOT_FOUND beyond the current version)"))] = None) -> Response:
    view = await _readable(request, object_id, principal, read_model)
    if version is not None:
        view = await _as_of(object_id, view, version, read_model)
    etag = f'"{view.version}"'
    if view.deleted:
        raise ApiError(f"object {object_id!r} was deleted at version {view.version}", code="DELETED",
                       headers={"ETag": etag})
    _refuse_unserved(object_id, view)
    if if_none_match is not None and etag in [t.strip() for t in if_none_match.split(",")]:
        return Response(status_code=304, headers={"ETag": etag})
    try:
        body = _strict_json(view.document).encode("utf-8")
    except (ValueError, UnicodeEncodeError) as e:  # stored before such documents were refused
        raise ApiError(f"object {object_id!r} holds a document that is not RFC 8259 JSON ({e}); rebuild the read "
                       "model (arbiter project db --rebuild)", code="UNSERVABLE_DOCUMENT",
                       headers={"Retry-After": "3600"}) from e
    return Response(body, media_type="application/json", headers={"ETag": etag})


async def _refuse_erased(object_id: str, view: ObjectViewLike, read_model: Any) -> None:  # noqa: ANN401
    """A deleted object with no history entry at its deletion had its history erased (``arbiter erase``): its
    events and past versions are ``410 DELETED``, as the object itself is, to those its tombstone admits."""
    if not await _blocking(read_model, read_model.history, object_id, view.version - 1, 1):
        raise ApiError(f"object {object_id!r} was deleted at version {view.version} and its history erased",
                       code="DELETED", headers={"ETag": f'"{view.version}"'})


async def _as_of(object_id: str, current: ObjectViewLike, version: int, read_model: Any) -> ObjectViewLike:  # noqa: ANN401
    """Return the object's view at ``version``, folded from its history by the read model's own fold."""
    if current.stale:  # events are missing: the history has a hole too
        _refuse_unserved(object_id, current)
    if version > current.version:
        raise ApiError(f"object {object_id!r} is at version {current.version}", code="VERSION_NOT_FOUND")
    if current.deleted:
        await _refuse_erased(object_id, current, read_model)
    entries = await _blocking(read_model, read_model.history, object_id, 0, None, version)  # type: ignore[attr-defined]
    view = fold(object_id, entries, version)
    if view is None or view.version != version:  # history kept from later on (a read model older than history)
        raise ApiError(f"the history of object {object_id!r} does not reach back to version {version}; rebuild the "
                       "read model (arbiter project db --rebuild)", code="VIEW_STALE", headers={"Retry-After": "3600"})
    return view
