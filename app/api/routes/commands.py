"""Command routes: ``POST /commands:batch`` for bulk clients, ``GET /commands/{id}`` for outcomes and its explanation."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse

from app.api.callers.auth import SHARE, WRITE, Caller
from app.api.deps import CallerDep, ContextDep, ReaderDep
from app.api.http.json_body import StrictJsonRoute
from app.api.models import (
    BatchCreate,
    BatchDelete,
    BatchGrant,
    BatchGrantReader,
    BatchItem,
    BatchRequest,
    BatchResponse,
    BatchRevoke,
    BatchRevokeReader,
    BatchUpdate,
    CommandOutcome,
    compact_json,
)
from app.api.problems import PROBLEM_RESPONSES, RATE_LIMITED_RESPONSE, ApiError, status_of
from app.api.rules import PRECHECK_DEADLINE_S, RULES_VERSION_HEADER, precheck
from app.api.writes.claims import KeyClaims
from app.api.writes.outcomes import durable_lookup
from app.api.writes.producer import Delivered
from app.api.writes.quota import refusal
from app.api.writes.submit import new_object_id, now, refuse_reserved
from app.api.writes.summary import warning_header, warnings_json
from app.errors import BrokerUnavailable
from app.limits import for_settings
from commands import (
    Command,
    CreateObject,
    DeleteObject,
    GrantEditor,
    GrantReader,
    Rejection,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
)
from commands.errors import ArbiterError
from schemas import codec

router = APIRouter(prefix="/commands", tags=["commands"], route_class=StrictJsonRoute)


def _command(item: BatchItem, caller: Caller, issued_at: Any) -> Command:
    cid = item.idempotency_key or str(uuid.uuid4())
    ev = item.expected_version
    principal, groups, issuer, jti = caller.principal, caller.groups, caller.issuer, caller.jti
    if isinstance(item, BatchCreate):
        return CreateObject(cid, item.object_id or new_object_id(principal, cid), principal, issued_at, ev,
                            document=compact_json(item.document), groups=groups, issuer=issuer, jti=jti)
    if isinstance(item, BatchUpdate):
        return UpdateObject(cid, item.object_id, principal, issued_at, ev, patch=compact_json(item.patch),
                            groups=groups, issuer=issuer, jti=jti)
    if isinstance(item, BatchDelete):
        return DeleteObject(cid, item.object_id, principal, issued_at, ev, groups=groups, issuer=issuer, jti=jti)
    if isinstance(item, BatchGrant):
        return GrantEditor(cid, item.object_id, principal, issued_at, ev, editor=item.editor, groups=groups,
                           issuer=issuer, jti=jti)
    if isinstance(item, BatchRevoke):
        return RevokeEditor(cid, item.object_id, principal, issued_at, ev, editor=item.editor, groups=groups,
                            issuer=issuer, jti=jti)
    if isinstance(item, BatchGrantReader):
        return GrantReader(cid, item.object_id, principal, issued_at, ev, reader=item.reader, groups=groups,
                           issuer=issuer, jti=jti)
    assert isinstance(item, BatchRevokeReader)
    return RevokeReader(cid, item.object_id, principal, issued_at, ev, reader=item.reader, groups=groups,
                        issuer=issuer, jti=jti)


#: Items built and encoded between yields of the event loop: a 1 MiB batch never holds the loop for long.
BUILD_CHUNK = 256


@router.post(":batch", response_model=BatchResponse, status_code=202,
             responses={**PROBLEM_RESPONSES, **RATE_LIMITED_RESPONSE, 503: PROBLEM_RESPONSES[503] | {
                 "description": "Some commands were not stored: `results` says which; retry those with their ids"},
                 413: PROBLEM_RESPONSES[413] | {
                 "description": "Too many commands, or some were too large and not stored: `results` says which"},
                 422: {"description": "Some typed updates were refused by the newest rules (the advisory pre-check of "
                       "`PATCH /objects/{id}`), or some items' idempotency keys already name another object "
                       "(IDEMPOTENCY_KEY_REUSED), and were not stored: `results` says which; the others were stored"}},
             summary="Queue many commands in one request; one result per command, in order")
async def batch(body: BatchRequest, caller: CallerDep, ctx: ContextDep) -> JSONResponse:
    """One result per command (202 stored, 413 too large, 422 refused by the rules' pre-check, 503 not
    acknowledged); never a bare 500."""
    principal = caller.principal
    sharing = (BatchGrant, BatchRevoke, BatchGrantReader, BatchRevokeReader)
    for scope in sorted({SHARE if isinstance(c, sharing) else WRITE for c in body.commands}):
        caller.require(scope)  # the whole batch is refused (403) before any of it is produced
    settings, producer, metrics, writes = ctx.settings, ctx.producer, ctx.metrics, ctx.quotas.writes
    n = len(body.commands)
    most = min(settings.batch_max_commands, writes.burst) if writes.enabled else settings.batch_max_commands
    if n > most:  # a batch over the write burst could never be served: refused whole, as too large
        raise ApiError(f"{n} commands; the limit is {most} (ARBITER_BATCH_MAX_COMMANDS"
                       f"{', ARBITER_WRITE_BURST' if most < settings.batch_max_commands else ''})", code="BODY_TOO_LARGE")
    pause = writes.take(principal, n)  # N commands cost N tokens, taken all or none
    if pause:
        metrics.rate_limited.labels(writes.name).inc()
        raise refusal(writes, principal, pause, n)
    issued_at = now()
    largest = for_settings(settings).max_document_bytes
    encode = codec.encode_command
    cmds: list[Command] = []
    results: list[dict[str, Any] | None] = []
    queued: list[int] = []  # index in cmds of each record
    deadline = time.monotonic() + PRECHECK_DEADLINE_S  # one for the batch's pre-checks: past it, the rest go unchecked
    for i, item in enumerate(body.commands):
        if i and not i % BUILD_CHUNK:
            await asyncio.sleep(0)
        c = _command(item, caller, issued_at)
        cmds.append(c)
        try:
            refuse_reserved(c.object_id)  # as POST /objects answers: never signed, never produced
        except ApiError as e:
            results.append(_refused(c, e))
            continue
        if c.size > largest:  # what POST /objects answers 413: the validator would reject it TOO_LARGE
            results.append(_refused(c, ApiError(f"the document or patch is {c.size} bytes, over the {largest} whose "
                                                "event fits a Kafka record", code="TOO_LARGE")))
            continue
        early = await precheck(ctx.rules, c, deadline)  # what PATCH /objects/{id} answers 422: not produced
        if early is not None:
            results.append(_rule_refused(c, early))
            continue
        results.append(None)
        queued.append(i)
    keys_retry_after: str | None = None  # Retry-After of items refused TOO_MANY_IDEMPOTENCY_KEYS
    if ctx.claims is not None:  # each keyed item's key must name its object (app.api.writes.claims), as on POST /objects
        queued, keys_retry_after = await _claimed(
            ctx.claims, [(i, cmds[i]) for i in queued if body.commands[i].idempotency_key], queued, results)
    records = [(cmds[i].object_id, encode(cmds[i])) for i in queued]
    start = time.perf_counter()
    delivered = await producer.send_many(records) if records else []
    metrics.produce_seconds.labels("batch").observe(time.perf_counter() - start)
    for i, d in zip(queued, delivered, strict=True):
        c = cmds[i]
        results[i] = {"command_id": c.command_id, "object_id": c.object_id, "status": 202,
                      "partition": d.partition, "offset": d.offset} if isinstance(d, Delivered) else _refused(c, d)
    answers = [r for r in results if r is not None]
    statuses = [r["status"] for r in answers]
    for r in answers:
        if r["status"] != 202:
            metrics.produce_failures.labels(r["code"]).inc()
    metrics.produced.inc(statuses.count(202))
    unavailable, too_large, refused = statuses.count(503), statuses.count(413), statuses.count(422)
    if unavailable:
        raise ApiError(f"{unavailable + too_large} of {len(cmds)} commands were not stored ({unavailable} not "
                       f"acknowledged by the broker, {too_large} too large); retry the 503 ones with their command ids "
                       "as idempotency keys", code="BROKER_UNAVAILABLE",
                       headers={"Retry-After": str(settings.retry_after_s)}, results=answers)
    if too_large:
        raise ApiError(f"{too_large} of {len(cmds)} commands were too large and not stored; the others were",
                       code="TOO_LARGE", results=answers)
    over_keys = statuses.count(429)
    if over_keys:
        raise ApiError(f"{over_keys} of {len(cmds)} commands would claim an Idempotency-Key beyond the most the principal "
                       "may hold and were not stored; the others were", code="TOO_MANY_IDEMPOTENCY_KEYS",
                       headers={"Retry-After": keys_retry_after or str(settings.retry_after_s)}, results=answers)
    reused = sum(1 for r in answers if r.get("code") == "IDEMPOTENCY_KEY_REUSED")
    if reused:
        raise ApiError(f"{reused} of {len(cmds)} commands reuse an Idempotency-Key that names another object and were "
                       f"not stored{f', {refused - reused} were refused by the newest rules' if refused > reused else ''};"
                       " the others were", code="IDEMPOTENCY_KEY_REUSED", results=answers)
    if refused:
        raise ApiError(f"{refused} of {len(cmds)} commands were refused by the newest rules the API has seen (an "
                       "advisory pre-check) and not stored; the others were", code="RULE_VIOLATED", results=answers)
    return JSONResponse({"results": answers}, status_code=202)


def _rule_refused(c: Command, early: Rejection) -> dict[str, Any]:
    return {"command_id": c.command_id, "object_id": c.object_id, "status": status_of(early.reason.value),
            "code": early.reason.value, "error": early.message, "rule": early.rule, "rule_message": early.rule_message,
            "rules_version": early.rules_version}


async def _claimed(claims: KeyClaims, keyed: list[tuple[int, Command]], queued: list[int],
                   results: list[dict[str, Any] | None]) -> tuple[list[int], str | None]:
    """Return ``queued`` without the keyed items whose key is refused (their results say why), and the longest
    Retry-After of those refused because the principal holds its most keys (None: none was)."""
    refused: set[int] = set()
    retry_after: str | None = None
    checks = await asyncio.gather(*(claims.check(c) for _, c in keyed), return_exceptions=True)
    for (i, c), e in zip(keyed, checks, strict=True):
        if isinstance(e, ApiError):
            results[i] = _refused(c, e)
            refused.add(i)
            if e.code == "TOO_MANY_IDEMPOTENCY_KEYS":
                retry_after = max(retry_after or "0", e.headers["Retry-After"], key=int)
        elif e is not None:
            raise e
    return [i for i in queued if i not in refused], retry_after


def _refused(c: Command, e: ApiError | BrokerUnavailable) -> dict[str, Any]:
    return {"command_id": c.command_id, "object_id": c.object_id, "status": status_of(e.code), "code": e.code,
            "error": e.message}


@router.get("/{command_id}", response_model=CommandOutcome,
            responses={401: PROBLEM_RESPONSES[401], **RATE_LIMITED_RESPONSE,
                       404: PROBLEM_RESPONSES[401] | {"description": "No outcome known (yet) for the caller's "
                                                      "command"}},
            summary="The outcome of one of the caller's commands: this process's cache, else the audit trail")
async def command_outcome(request: Request, command_id: Annotated[str, Path(max_length=200)], principal: ReaderDep,
                          ctx: ContextDep) -> JSONResponse:
    # Keyed by (principal, command id) in both places: another principal's command is exactly as unknown as none.
    o = ctx.outcomes.lookup(principal, command_id)
    if o is None:
        o = durable_lookup(request.app.state.durable_outcomes, principal, command_id)
    if o is None:
        raise ApiError(f"no outcome known for command {command_id!r}: not decided yet, or not (yet) in the audit "
                       "trail", code="NOT_FOUND")
    body = {"command_id": command_id, "object_id": o.object_id, "status": o.kind, "version": o.version,
            "event": o.event, "reason": o.reason, "message": o.message}
    headers = {"ETag": f'"{o.version}"'} if o.kind == "accepted" else {}
    if o.rules_version is not None:  # decided under the team's rules: their version, as the write's answer says
        headers[RULES_VERSION_HEADER] = str(o.rules_version)
    if o.warnings:  # rules in warn mode that would have refused it
        body["warnings"] = warnings_json(o.warnings)
        headers["Warning"] = warning_header(o.warnings)
    return JSONResponse(body, headers=headers or None)


@router.get("/{command_id}/explanation",
            responses={401: PROBLEM_RESPONSES[401], **RATE_LIMITED_RESPONSE,
                       404: PROBLEM_RESPONSES[401] | {"description": "No outcome known for the caller's command, or "
                                                      "it is not archived yet"}, 503: PROBLEM_RESPONSES[503]},
            summary="Why one of the caller's commands was decided as it was: the rules version, each rule that ran "
                    "in order, its inputs and result (decide re-run with its tracing hook on the archived history)")
async def command_explanation(request: Request, command_id: Annotated[str, Path(max_length=200)],
                              principal: ReaderDep, ctx: ContextDep) -> JSONResponse:
    # The gate of GET /commands/{id}: keyed by (principal, command id), another principal's command is exactly as
    # unknown as none, and so is one whose object the caller has never seen decided.
    o = ctx.outcomes.lookup(principal, command_id)
    if o is None:
        o = durable_lookup(request.app.state.durable_outcomes, principal, command_id)
    missing = ApiError(f"no outcome known for command {command_id!r}: not decided yet, or not (yet) in the audit "
                       "trail", code="NOT_FOUND")
    if o is None or o.object_id is None:
        raise missing
    from app.verify.explain import explain_command

    try:
        found = await asyncio.to_thread(explain_command, ctx.settings, command_id, object_id=o.object_id,
                                        principal=principal)
    except ArbiterError:
        raise  # coded (a remote archive: ARCHIVE_NOT_LOCAL), mapped by the one handler
    except Exception as e:  # the generations topic unreadable: the broker's state, not the request's
        raise ApiError(f"the history of command {command_id!r} could not be read ({type(e).__name__}); retry",
                       code="BROKER_UNAVAILABLE", headers={"Retry-After": str(ctx.settings.retry_after_s)}) from e
    if not found:
        raise ApiError(f"command {command_id!r} is not archived yet (the archive trails the topic by its trigger); "
                       "ask again later", code="NOT_FOUND")
    return JSONResponse({"command_id": command_id, "object_id": o.object_id,
                         "explanations": [e.as_dict() for e in found]})
