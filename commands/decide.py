"""The one decision function: a command against an object's compact state gives an event or a rejection.

Checks run in this order; the first that fails decides the rejection:

1. MALFORMED      empty ``command_id``, ``object_id`` or ``principal``, or one over ``Limits.max_id_bytes``;
                  U+0000 in ``object_id`` or ``principal`` (``commands.json_text.id_problem``); an ``object_id``
                  in the namespace reserved for Arbiter's own records (``commands.ids.reserved``: ``arbiter:``).
2. visibility     (not for create) NOT_FOUND if the object is unknown, *or* if the principal may not read it
                  (``commands.access``): an outsider's rejection is byte-for-byte the one an unknown id gets
                  (version 0, same message), so a write never reveals that an object exists.
3. FORBIDDEN      only the owner deletes and grants or revokes editors and readers; owner and editors update.
4. dedup          the principal's own ``command_id`` in ``state.recent`` (unexpired; see ``commands.state``):
                  DUPLICATE if the request is the same (same fingerprint), naming the first attempt
                  (``original_outcome="ACCEPTED"``, ``original_version``); IDEMPOTENCY_KEY_REUSED if the key was
                  used for a different request. Another principal's entry never matches. For a create, which
                  anyone may send, this is the first check on an existing state.
5. existence      create: DELETED if the object was deleted (ids are not reused), ALREADY_EXISTS if it exists;
                  for a principal who may not read it, ALREADY_EXISTS at version 0 in both cases, the same bytes
                  (its version, and whether it was deleted, stay hidden as they do for NOT_FOUND).
                  Anything else: DELETED if deleted.
6. VERSION_CONFLICT ``expected_version`` is set and differs from the current version (0 before create).
7. TOO_LARGE      document or patch over ``Limits.max_document_bytes``; a grant beyond ``max_editors`` /
                  ``max_readers``.
8. payload        MALFORMED if the document or patch is not the RFC 8259 JSON text of an object within
                  ``Limits.max_json_depth`` (``commands.json_text``: no NaN/Infinity, no overflowing numbers, no
                  lone surrogates, no U+0000), or the editor/reader is empty, over ``max_id_bytes`` or holds
                  U+0000. Granting a current
                  editor (reader) or the owner is ALREADY_EXISTS; revoking a non-editor (non-reader) NOT_FOUND.

Cheap state checks come before size and JSON parsing, so a refused command is never parsed.

Only accepted commands are remembered in ``recent``: a rejection returns the very same state object, so
its encoded bytes are identical (a property the tests hold). A retry of a rejected command is therefore
decided afresh, which is correct because the rejected attempt changed nothing.

A deleted object keeps its owner, editors and readers (they are told DELETED; everyone else NOT_FOUND).

``decide`` reads no clock, environment or randomness: the event's ``occurred_at`` is the command's
``issued_at`` and ids are uuid5, so the same input always gives equal output.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commands.access import may_administer, may_read, may_update
from commands.command import (
    Command,
    CreateObject,
    DeleteObject,
    GrantEditor,
    GrantReader,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    fingerprint,
    utf8_size,
)
from commands.errors import ReasonCode
from commands.event import Event, EventType, RuleWarning
from commands.ids import RESERVED_PREFIX, command_rejection_id, event_id, reserved
from commands.json_text import id_problem, object_problem
from commands.rejection import Rejection, clip
from commands.rules.bounds import MAX_RULE_BYTES, MAX_WARNINGS, type_name_problem
from commands.rules.evaluate import Verdict, clip_bytes, watched_rules
from commands.rules.ruleset import RuleSet
from commands.rules.trace import RuleTrace
from commands.state import ACCEPTED, DEFAULT_LIMITS, Limits, ObjectState, RecentCommand, remember


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one command and the state after it (the input state, same object, on rejection)."""

    outcome: Event | Rejection
    state: ObjectState | None

    @property
    def accepted(self) -> bool:
        """Return True when the outcome is an event."""
        return isinstance(self.outcome, Event)


def _reject(state: ObjectState | None, command: Command, reason: ReasonCode, message: str, *,
            original: RecentCommand | None = None, version: int | None = None) -> Decision:
    if version is None:
        version = state.version if state is not None else 0
    rejection = Rejection(
        rejection_id=command_rejection_id(command.command_id, command.object_id, version, reason.value,
                                          command.principal),
        reason=reason,
        message=message,
        command_id=command.command_id,
        object_id=command.object_id,
        principal=command.principal,
        occurred_at=command.issued_at,
        current_version=version,
        original_outcome=original.outcome if original is not None else None,
        original_version=original.version if original is not None else None,
        issuer=command.issuer,
        jti=command.jti,
    )
    return Decision(rejection, state)


def _not_found(state: ObjectState | None, command: Command) -> Decision:
    # The same bytes whether the object is unknown or hidden from this principal: version 0, same message.
    return _reject(state, command, ReasonCode.NOT_FOUND, f"object {clip(command.object_id)} does not exist",
                   version=0)


def _rule_reject(state: ObjectState | None, command: Command, verdict: Verdict, rules: RuleSet | None) -> Decision:
    version = state.version if state is not None else 0
    rule = clip_bytes(verdict.rule, MAX_RULE_BYTES)
    rejection = Rejection(
        command_rejection_id(command.command_id, command.object_id, version, verdict.reason.value, command.principal),
        verdict.reason, clip(f"rule {rule}: {verdict.message}", 1000), command.command_id, command.object_id,
        command.principal, command.issued_at, version, None, None, None, command.issuer, command.jti,
        rules.version if rules is not None else None, rule, verdict.message, verdict.pointers)
    return Decision(rejection, state)


def _accept(state: ObjectState | None, command: Command, etype: EventType, limits: Limits,
            rules: RuleSet | None, *,
            owner: str, editors: tuple[str, ...], readers: tuple[str, ...], document_size: int,
            deleted: bool = False, document: str | None = None, patch: str | None = None,
            editor: str | None = None, reader: str | None = None, object_type: str | None = None,
            tracked: str | None = None, trace: RuleTrace | None = None) -> Decision:
    warnings: tuple[RuleWarning, ...] = ()
    if object_type is not None and (rules is not None or etype is EventType.CREATED):
        verdict, tracked, watched = watched_rules(rules, state, command, object_type, trace)
        if verdict is not None:
            return _rule_reject(state, command, verdict, rules)
        warnings = tuple(RuleWarning(clip_bytes(w.rule, MAX_RULE_BYTES), w.mode, w.reason.value, w.message,
                                     w.pointers) for w in watched[:MAX_WARNINGS])
    at = command.issued_at
    version = state.version + 1 if state is not None else 1
    entry = RecentCommand(command.command_id, ACCEPTED, version, at, command.principal, fingerprint(command))
    # Positional arguments, in field order: this runs once per accepted command.
    new_state = ObjectState(
        True,  # exists
        deleted,
        version,
        owner,
        editors,
        state.created_at if state is not None else at,  # created_at
        at,  # updated_at
        at if deleted else None,  # deleted_at
        document_size,
        remember(state.recent if state is not None else (), entry, limits),  # recent
        readers,
        object_type,
        tracked,
    )
    event = Event(event_id(command.object_id, version), etype, command.object_id, version, command.command_id,
                  command.principal, at, owner, document, patch, editor, reader, command.issuer, command.jti,
                  object_type, rules.version if rules is not None else None, warnings)
    return Decision(event, new_state)


def _grantee(command: Command) -> str | None:
    if isinstance(command, GrantEditor | RevokeEditor):
        return command.editor
    if isinstance(command, GrantReader | RevokeReader):
        return command.reader
    return None


def _check_payload(command: Command, limits: Limits) -> tuple[ReasonCode, str] | None:
    size = command.size
    if size > limits.max_document_bytes:
        return ReasonCode.TOO_LARGE, f"payload is {size} bytes, over the limit of {limits.max_document_bytes}"
    if isinstance(command, CreateObject):
        if command.object_type is not None:
            problem = type_name_problem(command.object_type)
            if problem is not None:
                return ReasonCode.MALFORMED, problem
        problem = object_problem(command.document, limits.max_json_depth)
        if problem is not None:
            return ReasonCode.MALFORMED, f"document must be the JSON text of an object: {problem}"
    elif isinstance(command, UpdateObject):
        problem = object_problem(command.patch, limits.max_json_depth)
        if problem is not None:
            return ReasonCode.MALFORMED, f"patch must be the JSON text of an object (RFC 7386 merge patch): {problem}"
    else:
        grantee = _grantee(command)
        if grantee is not None and not grantee:
            return ReasonCode.MALFORMED, "editor or reader must not be empty"
        if grantee is not None and utf8_size(grantee) > limits.max_id_bytes:
            return ReasonCode.MALFORMED, f"editor or reader is over {limits.max_id_bytes} bytes"
        problem = id_problem("editor or reader", grantee) if grantee is not None else None
        if problem is not None:
            return ReasonCode.MALFORMED, problem
    return None


def _ids_problem(command: Command, limits: Limits) -> str | None:
    if not command.command_id or not command.object_id or not command.principal:
        return "command_id, object_id and principal must not be empty"
    bound = limits.max_id_bytes
    for name, value in (("command_id", command.command_id), ("object_id", command.object_id),
                        ("principal", command.principal)):
        if len(value) > bound // 4 and utf8_size(value) > bound:
            return f"{name} is {utf8_size(value)} bytes, over the limit of {bound}"
    for name, value in (("object_id", command.object_id), ("principal", command.principal)):
        problem = id_problem(name, value)
        if problem is not None:
            return problem
    if reserved(command.object_id):
        return f"object ids starting {RESERVED_PREFIX!r} are reserved for Arbiter's own records"
    return None


def _dedup(state: ObjectState, command: Command, limits: Limits) -> Decision | None:
    seen = state.find_recent(command.command_id, command.issued_at, limits.dedup_ttl, command.principal)
    if seen is None:
        return None
    if seen.fingerprint is not None and seen.fingerprint != fingerprint(command):
        return _reject(state, command, ReasonCode.IDEMPOTENCY_KEY_REUSED,
                       f"idempotency key {clip(command.command_id)} was already used for a different request "
                       f"(accepted at version {seen.version}); use a new key for a new request")
    return _reject(state, command, ReasonCode.DUPLICATE,
                   f"command {clip(command.command_id)} was already decided: {seen.outcome} at version "
                   f"{seen.version}", original=seen)


def decide(state: ObjectState | None, command: Command, limits: Limits = DEFAULT_LIMITS,
           rules: RuleSet | None = None, trace: RuleTrace | None = None) -> Decision:
    """Decide ``command`` against ``state`` (None for an unknown object) under ``rules``; pure and deterministic.

    ``rules=None`` decides as Arbiter always has (a create that names a type is refused: no type is known);
    with a rule set every outcome names ``rules.version`` and typed objects follow their type's rules
    (``commands.rules.evaluate``), checked after every generic check. With ``trace`` (``commands.rules.trace``) the
    rules record each step as they run (``arbiter rules explain``); the decision is the same with or without one.
    """
    decision = _decide(state, command, limits, rules, trace)
    outcome = decision.outcome
    if rules is not None and isinstance(outcome, Rejection) and outcome.rules_version is None:
        return Decision(replace(outcome, rules_version=rules.version), decision.state)
    return decision


def _decide(state: ObjectState | None, command: Command, limits: Limits, rules: RuleSet | None,
            trace: RuleTrace | None) -> Decision:
    problem = _ids_problem(command, limits)
    if problem is not None:
        return _reject(state, command, ReasonCode.MALFORMED, problem)
    if isinstance(command, CreateObject):
        if state is not None:
            duplicate = _dedup(state, command, limits)
            if duplicate is not None:
                return duplicate
            if not may_read(command.principal, state.owner, state.editors, state.readers, command.groups):
                # Taken, but hidden: the same bytes whether it exists or was deleted, and no version (as NOT_FOUND).
                return _reject(state, command, ReasonCode.ALREADY_EXISTS, f"object {clip(command.object_id)} "
                               "exists", version=0)
            if state.deleted:
                return _reject(state, command, ReasonCode.DELETED, f"object {clip(command.object_id)} was "
                               "deleted; ids are not reused")
            if state.exists:
                return _reject(state, command, ReasonCode.ALREADY_EXISTS,
                               f"object {clip(command.object_id)} exists")
        return _decide_create(state, command, limits, rules, trace)
    if state is None or not (state.exists or state.deleted):
        return _not_found(state, command)
    principal = command.principal
    if not may_read(principal, state.owner, state.editors, state.readers, command.groups):
        return _not_found(state, command)
    if isinstance(command, UpdateObject):
        if not may_update(principal, state.owner, state.editors, command.groups):
            return _reject(state, command, ReasonCode.FORBIDDEN, "only the owner or an editor may do this")
    elif not may_administer(principal, state.owner):
        return _reject(state, command, ReasonCode.FORBIDDEN, "only the owner may do this")
    duplicate = _dedup(state, command, limits)
    if duplicate is not None:
        return duplicate
    if state.deleted:
        return _reject(state, command, ReasonCode.DELETED, f"object {clip(command.object_id)} was deleted")
    if command.expected_version is not None and command.expected_version != state.version:
        return _reject(state, command, ReasonCode.VERSION_CONFLICT,
                       f"expected version {command.expected_version}, current is {state.version}")
    problem_code = _check_payload(command, limits)
    if problem_code is not None:
        return _reject(state, command, *problem_code)
    return _decide_change(state, command, limits, rules, trace)


def _decide_create(state: ObjectState | None, command: CreateObject, limits: Limits, rules: RuleSet | None,
                   trace: RuleTrace | None) -> Decision:
    if command.expected_version is not None and command.expected_version != 0:
        return _reject(state, command, ReasonCode.VERSION_CONFLICT,
                       f"expected version {command.expected_version}, object does not exist (version 0)")
    problem = _check_payload(command, limits)
    if problem is not None:
        return _reject(state, command, *problem)
    return _accept(state, command, EventType.CREATED, limits, rules, owner=command.principal, editors=(), readers=(),
                   document_size=command.size, document=command.document, object_type=command.object_type,
                   trace=trace)


def _decide_change(state: ObjectState, command: Command, limits: Limits, rules: RuleSet | None,
                   trace: RuleTrace | None) -> Decision:
    owner, editors, readers, size = state.owner, state.editors, state.readers, state.document_size
    ot, tr = state.object_type, state.tracked  # a change keeps the type; only a rule-checked update moves tracked
    if isinstance(command, UpdateObject):
        return _accept(state, command, EventType.UPDATED, limits, rules, trace=trace,
                       object_type=ot, tracked=tr, owner=owner,
                       editors=editors, readers=readers, document_size=size, patch=command.patch)
    if isinstance(command, DeleteObject):
        return _accept(state, command, EventType.DELETED, limits, rules, trace=trace,
                       object_type=ot, tracked=tr, owner=owner,
                       editors=editors, readers=readers, document_size=size, deleted=True)
    if isinstance(command, GrantEditor):
        if command.editor == owner or command.editor in editors:
            return _reject(state, command, ReasonCode.ALREADY_EXISTS, f"{clip(command.editor)} may already edit")
        if len(editors) >= limits.max_editors:
            return _reject(state, command, ReasonCode.TOO_LARGE,
                           f"object already has the maximum of {limits.max_editors} editors")
        return _accept(state, command, EventType.EDITOR_GRANTED, limits, rules, trace=trace,
                       object_type=ot, tracked=tr, owner=owner,
                       editors=(*editors, command.editor), readers=readers, document_size=size,
                       editor=command.editor)
    if isinstance(command, RevokeEditor):
        if command.editor not in editors:
            return _reject(state, command, ReasonCode.NOT_FOUND, f"{clip(command.editor)} is not an editor")
        return _accept(state, command, EventType.EDITOR_REVOKED, limits, rules, trace=trace,
                       object_type=ot, tracked=tr, owner=owner,
                       editors=tuple(e for e in editors if e != command.editor), readers=readers,
                       document_size=size, editor=command.editor)
    if isinstance(command, GrantReader):
        if command.reader == owner or command.reader in readers:
            return _reject(state, command, ReasonCode.ALREADY_EXISTS, f"{clip(command.reader)} may already read")
        if len(readers) >= limits.max_readers:
            return _reject(state, command, ReasonCode.TOO_LARGE,
                           f"object already has the maximum of {limits.max_readers} readers")
        return _accept(state, command, EventType.READER_GRANTED, limits, rules, trace=trace,
                       object_type=ot, tracked=tr, owner=owner,
                       editors=editors,
                       readers=(*readers, command.reader), document_size=size, reader=command.reader)
    if isinstance(command, RevokeReader):
        if command.reader not in readers:
            return _reject(state, command, ReasonCode.NOT_FOUND, f"{clip(command.reader)} is not a reader")
        return _accept(state, command, EventType.READER_REVOKED, limits, rules, trace=trace,
                       object_type=ot, tracked=tr, owner=owner,
                       editors=editors,
                       readers=tuple(r for r in readers if r != command.reader), document_size=size,
                       reader=command.reader)
    raise TypeError(f"not a command: {type(command).__name__}")  # pragma: no cover - exhaustive union
