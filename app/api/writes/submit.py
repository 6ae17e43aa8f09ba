"""The write path shared by every write route: encode, produce keyed by object id, optionally wait, answer."""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fastapi import Response

from app.api.callers.auth import Caller, scope_for
from app.api.deps import ApiContext
from app.api.models import CreateRequest, compact_json
from app.api.problems import ApiError, Rejected
from app.api.reads.position import HEADER as POSITION_HEADER
from app.api.reads.position import format_position
from app.api.rules import RULES_VERSION_HEADER, precheck
from app.api.telemetry.traces import note_command
from app.api.writes.outcomes import OVER_SHARE
from app.api.writes.quota import refusal
from app.api.writes.summary import OutcomeSummary, summarize, warning_header, warnings_json
from app.api.writes.timing import HEADER as TIMING_HEADER
from app.api.writes.timing import server_timing
from app.errors import BrokerUnavailable
from app.limits import for_settings
from commands import ACCEPTED, Command, CreateObject, DeleteObject, ReasonCode, UpdateObject
from commands.ids import RESERVED_PREFIX, reserved, uuid5
from schemas import codec

IF_MATCH_PATTERN = r'^"[0-9]{1,18}"$'
_WAIT = re.compile(r"^\s*wait\s*=\s*\"?([0-9]+(?:\.[0-9]+)?)\"?\s*$", re.IGNORECASE)


def now() -> datetime:
    """Return the current time in UTC (every command's ``issued_at``)."""
    return datetime.now(UTC)


def command_id(idempotency_key: str | None) -> str:
    """Return the Idempotency-Key (a retry keeps its command id) or a fresh uuid4."""
    return idempotency_key if idempotency_key else str(uuid.uuid4())


def new_object_id(principal: str, command_id: str) -> str:
    """Return the id of an object created without one: uuid5 of (principal, command id).

    Deterministic, so a retried create (same Idempotency-Key) lands on the same object and is answered
    DUPLICATE -> the original outcome instead of creating a second object; another principal's same key
    names another object.
    """
    return uuid5(f"object:{principal}:{command_id}")


def expected_version(if_match: str | None) -> int | None:
    """Return the version in ``If-Match: "<n>"`` (the route's schema already checked the form)."""
    if if_match is None:
        return None
    if not re.fullmatch(IF_MATCH_PATTERN, if_match.strip()):
        raise ApiError(f'If-Match must be one strong ETag "<version>", got {if_match!r}', code="BAD_REQUEST")
    return int(if_match.strip()[1:-1])


def prefer_wait(prefer: list[str], cap: float) -> float | None:
    """Return the ``wait`` preference (RFC 7240) capped at ``cap``; unknown or malformed preferences are ignored."""
    for header in prefer:
        for pref in header.split(","):
            m = _WAIT.match(pref.split(";")[0])
            if m:
                return min(float(m.group(1)), cap)
    return None


def create_command(principal: str, body: CreateRequest, idempotency_key: str | None,
                   if_match: str | None) -> CreateObject:
    """Return the command of ``POST /objects`` (the FastAPI route and ``app.api.writes.fast_writes`` build it here)."""
    cid = command_id(idempotency_key)
    return CreateObject(cid, body.id or new_object_id(principal, cid), principal, now(), expected_version(if_match),
                        document=compact_json(body.document), object_type=body.type)


def update_command(principal: str, object_id: str, patch: dict[str, Any], idempotency_key: str | None,
                   if_match: str | None) -> UpdateObject:
    """Return the command of ``PATCH /objects/{id}``."""
    return UpdateObject(command_id(idempotency_key), object_id, principal, now(), expected_version(if_match),
                        patch=compact_json(patch))


def delete_command(principal: str, object_id: str, idempotency_key: str | None, if_match: str | None) -> DeleteObject:
    """Return the command of ``DELETE /objects/{id}``."""
    return DeleteObject(command_id(idempotency_key), object_id, principal, now(), expected_version(if_match))


#: Starlette's ``JSONResponse`` bytes exactly, from one encoder (``json.dumps`` with options builds one per call).
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode


def _json(body: dict[str, Any], status: int, headers: dict[str, str]) -> Response:
    return Response(_encode(body).encode("utf-8"), status_code=status, headers=headers, media_type="application/json")


def for_caller(cmd: Command, caller: Caller) -> Command:
    """Return ``cmd`` as ``caller`` may send it: 403 INSUFFICIENT_SCOPE without the scope its kind needs; else with
    the caller's groups, token issuer and ``jti`` copied in (the validator decides group grants from the command
    alone; the audit trail records issuer and ``jti``). Every write route and ``app.api.writes.fast_writes`` go through it.
    """
    caller.require(scope_for(cmd))
    refuse_reserved(cmd.object_id)
    return replace(cmd, groups=caller.groups, issuer=caller.issuer, jti=caller.jti)


def refuse_reserved(object_id: str) -> str:
    """Return ``object_id``; raise ``RESERVED_ID`` (422) for one in the namespace of Arbiter's own records, which the
    API never signs a command for (issue 47: a copy of such a record must not pass for a generation or rules record)."""
    if reserved(object_id):
        raise ApiError(f"object id {object_id[:64]!r}: ids starting {RESERVED_PREFIX!r} are reserved for Arbiter's "
                       "own records", code="RESERVED_ID")
    return object_id


def _success_status(cmd: Command) -> int:
    return 201 if isinstance(cmd, CreateObject) else 204 if isinstance(cmd, DeleteObject) else 200


def _decided(cmd: Command, version: int, event: str | None, decision: OutcomeSummary | None,
             extra: dict[str, str]) -> Response:
    """Answer ``cmd`` as accepted at ``version``; ``decision`` (its event's summary, if known) gives its position."""
    headers = {"ETag": f'"{version}"', **extra}
    if decision is not None and decision.partition is not None and decision.offset is not None:
        headers[POSITION_HEADER] = format_position(decision.partition, decision.offset)
    if decision is not None and decision.rules_version is not None:  # decided under the team's rules (README "Rules")
        headers[RULES_VERSION_HEADER] = str(decision.rules_version)
    warnings = decision.warnings if decision is not None else ()
    if warnings:  # rules in warn mode that would have refused it (commands.rules.evaluate)
        headers["Warning"] = warning_header(warnings)
    status = _success_status(cmd)
    if status == 204:
        return Response(status_code=204, headers=headers)
    if status == 201:
        headers["Location"] = f"/objects/{cmd.object_id}"
    body: dict[str, Any] = {"command_id": cmd.command_id, "object_id": cmd.object_id, "status": "accepted",
                            "version": version, "event": event}
    if warnings:
        body["warnings"] = warnings_json(warnings)
    return _json(body, status, headers)


async def submit(cmd: Command, ctx: ApiContext, wait: float | None, *, keyed: bool = False) -> Response:
    """Produce ``cmd``; answer 202 once acknowledged, or the decision if it arrives within ``wait`` seconds.

    A document or patch over ``app.limits``' ``max_document_bytes`` is 413 TOO_LARGE, not produced. A waiter
    slot is taken *before* producing: when all ``max_waiters`` are taken the answer is 503
    TOO_MANY_WAITERS and nothing was produced; when the principal already holds its share of them
    (``ARBITER_WAITER_SHARE``) the command is produced and answered 202 without waiting. A principal over its write
    rate is 429 RATE_LIMITED before anything else. A ``keyed`` command (its id is the client's Idempotency-Key) is
    produced only if its key names its object (``app.api.writes.claims``): else 422 IDEMPOTENCY_KEY_REUSED, or 429
    TOO_MANY_IDEMPOTENCY_KEYS when its principal holds ``ARBITER_MAX_KEYS_PER_PRINCIPAL`` other keys.
    """
    writes = ctx.quotas.writes
    pause = writes.take(cmd.principal)
    if pause:
        ctx.metrics.rate_limited.labels(writes.name).inc()
        raise refusal(writes, cmd.principal, pause)
    largest = for_settings(ctx.settings).max_document_bytes
    if cmd.size > largest:  # the validator would reject it TOO_LARGE: say so now, and store nothing
        raise ApiError(f"the document or patch is {cmd.size} bytes, over the {largest} whose event fits a Kafka "
                       "record (ARBITER_MAX_MESSAGE_BYTES)", code=ReasonCode.TOO_LARGE.value)
    early = await precheck(ctx.rules, cmd)
    if early is not None:  # advisory: the validator would refuse it under the newest rules the API has seen
        summary = summarize(early)
        assert summary is not None  # a command's rejection has its command id and principal
        raise Rejected(summary, expected_version=cmd.expected_version,
                       headers={RULES_VERSION_HEADER: str(early.rules_version)})
    if keyed and ctx.claims is not None:
        try:
            await ctx.claims.check(cmd)
        except ApiError as e:  # the key's claim not stored, so neither is the command: counted as a produce failure
            if e.code == BrokerUnavailable.code:
                ctx.metrics.produce_failures.labels(e.code).inc()
            raise
    outcomes = ctx.outcomes
    if not wait:
        return await _submit(cmd, ctx, None)
    reserved = outcomes.reserve_waiter(cmd.principal)
    if reserved is OVER_SHARE:  # this principal holds its share of the waiters: produced, answered 202
        ctx.metrics.waits.labels("over_share").inc()
        return await _submit(cmd, ctx, None)
    if not reserved:
        ctx.metrics.waits.labels("refused").inc()
        raise ApiError(f"{outcomes.max_waiters} requests are already waiting for decisions (ARBITER_MAX_WAITERS); "
                       "the command was not produced: retry later, or without Prefer: wait", code="TOO_MANY_WAITERS",
                       headers={"Retry-After": str(ctx.settings.retry_after_s)}, command_id=cmd.command_id)
    try:
        return await _submit(cmd, ctx, wait)
    finally:
        outcomes.release_waiter(cmd.principal)


async def _submit(cmd: Command, ctx: ApiContext, wait: float | None) -> Response:
    settings, producer, outcomes, metrics = ctx.settings, ctx.producer, ctx.outcomes, ctx.metrics
    if producer.traced:
        note_command(cmd)  # its ids on the write's span (app.api.telemetry.traces)
    value = codec.encode_command(cmd)
    start = time.perf_counter()
    try:
        delivered = await producer.send(cmd.object_id, value)
    except (BrokerUnavailable, ApiError) as e:
        metrics.produce_failures.labels(e.code).inc()
        if isinstance(e, BrokerUnavailable):
            raise ApiError(e.message, code=e.code, headers={"Retry-After": str(settings.retry_after_s)},
                           command_id=cmd.command_id) from e
        raise
    acked = time.perf_counter()
    metrics.produce_seconds.labels("single").observe(acked - start)
    metrics.produced.inc()
    if wait:
        acked_ms = time.time() * 1000  # wall clock: compared with the decision record's timestamp (app.api.writes.timing)
        outcome = await outcomes.wait(cmd.principal, cmd.command_id, cmd.issued_at, wait)
        metrics.waits.labels("timeout" if outcome is None else "decided").inc()
        timing = {TIMING_HEADER: server_timing(acked - start, acked_ms, time.perf_counter() - acked, outcome)}
        if outcome is not None and outcome.kind == "accepted" and outcome.version is not None:
            return _decided(cmd, outcome.version, outcome.event, outcome, timing)
        if outcome is not None:
            if outcome.reason == ReasonCode.DUPLICATE and outcome.original_outcome == ACCEPTED \
                    and outcome.original_version is not None:
                # the original's event, if this process saw it: its position is this retry's position too
                original = outcomes.lookup(cmd.principal, cmd.command_id)
                known = original if original is not None and original.kind == "accepted" \
                    and original.version == outcome.original_version else None
                return _decided(cmd, outcome.original_version, None, known, timing)
            raise Rejected(outcome, expected_version=cmd.expected_version, headers=timing)
    location = f"/commands/{cmd.command_id}"
    body = {"command_id": cmd.command_id, "object_id": cmd.object_id, "status": "queued",
            "partition": delivered.partition, "offset": delivered.offset}
    headers = {"Location": location}
    if wait:
        headers.update(timing)
    return _json(body, 202, headers)
