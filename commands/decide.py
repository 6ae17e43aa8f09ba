"""The one decision function: a command against an object's compact state gives an event or a rejection.

Checks run in this order; the first that fails decides the rejection:

1. MALFORMED      empty ``command_id`` or ``object_id`` (nothing to deduplicate or route on).
2. DUPLICATE      ``command_id`` is in ``state.recent`` and unexpired (see ``commands.state``). The
                  rejection names the first attempt: ``original_outcome="ACCEPTED"``, ``original_version``
                  = the version it produced, ``current_version`` = the version now. Nothing is applied.
3. existence      create: ALREADY_EXISTS if the object exists, DELETED if it was deleted (ids are not
                  reused). Anything else: NOT_FOUND if unknown, DELETED if deleted.
4. FORBIDDEN      only the owner deletes, grants and revokes; owner and editors update.
5. VERSION_CONFLICT ``expected_version`` is set and differs from the current version (0 before create).
6. TOO_LARGE      document or patch over ``Limits.max_document_bytes``; a grant beyond ``max_editors``.
7. payload        MALFORMED if the document is not a JSON object, the patch not a JSON object (documents
                  are objects, so a non-object patch, which would replace the whole document, is refused),
                  or the editor is empty. Granting a current editor or the owner is ALREADY_EXISTS;
                  revoking a non-editor is NOT_FOUND.

Cheap state checks come before size and JSON parsing, so a refused command is never parsed.

Only accepted commands are remembered in ``recent``: a rejection returns the very same state object, so
its encoded bytes are identical (a property the tests hold). A retry of a rejected command is therefore
decided afresh, which is correct because the rejected attempt changed nothing: the retry is answered as
the state now stands (e.g. it may succeed once the version it expected is current, or be rejected again).

``decide`` reads no clock, environment or randomness: the event's ``occurred_at`` is the command's
``issued_at`` and ids are uuid5, so the same input always gives equal output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from commands.command import Command, CreateObject, DeleteObject, GrantEditor, RevokeEditor, UpdateObject
from commands.errors import ReasonCode
from commands.event import Event, EventType
from commands.ids import command_rejection_id, event_id
from commands.rejection import Rejection
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
            original: RecentCommand | None = None) -> Decision:
    version = state.version if state is not None else 0
    rejection = Rejection(
        rejection_id=command_rejection_id(command.command_id, command.object_id, version, reason.value),
        reason=reason,
        message=message,
        command_id=command.command_id,
        object_id=command.object_id,
        principal=command.principal,
        occurred_at=command.issued_at,
        current_version=version,
        original_outcome=original.outcome if original is not None else None,
        original_version=original.version if original is not None else None,
    )
    return Decision(rejection, state)


def _is_json_object(text: str) -> bool:
    # A cheap first-character test spares json.loads for most garbage; a real object still needs a parse.
    if not text.lstrip().startswith("{"):
        return False
    try:
        value = json.loads(text)
        if "\\u" in text:  # an escaped lone surrogate parses but can never be stored or sent as UTF-8
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return False
    return isinstance(value, dict)


def _accept(state: ObjectState | None, command: Command, etype: EventType, limits: Limits, *,
            owner: str, editors: tuple[str, ...], document_size: int, deleted: bool = False,
            document: str | None = None, patch: str | None = None, editor: str | None = None) -> Decision:
    at = command.issued_at
    version = state.version + 1 if state is not None else 1
    entry = RecentCommand(command.command_id, ACCEPTED, version, at)
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
    )
    event = Event(event_id(command.object_id, version), etype, command.object_id, version, command.command_id,
                  command.principal, at, owner, document, patch, editor)
    return Decision(event, new_state)


def _check_payload(command: Command, limits: Limits) -> tuple[ReasonCode, str] | None:
    size = command.size
    if size > limits.max_document_bytes:
        return ReasonCode.TOO_LARGE, f"payload is {size} bytes, over the limit of {limits.max_document_bytes}"
    if isinstance(command, CreateObject) and not _is_json_object(command.document):
        return ReasonCode.MALFORMED, "document must be the JSON text of an object"
    if isinstance(command, UpdateObject) and not _is_json_object(command.patch):
        return ReasonCode.MALFORMED, "patch must be the JSON text of an object (RFC 7386 merge patch)"
    if isinstance(command, GrantEditor | RevokeEditor) and not command.editor:
        return ReasonCode.MALFORMED, "editor must not be empty"
    return None


def decide(state: ObjectState | None, command: Command, limits: Limits = DEFAULT_LIMITS) -> Decision:
    """Decide ``command`` against ``state`` (None for an unknown object); pure and deterministic."""
    if not command.command_id or not command.object_id:
        return _reject(state, command, ReasonCode.MALFORMED, "command_id and object_id must not be empty")
    if state is not None:
        seen = state.find_recent(command.command_id, command.issued_at, limits.dedup_ttl)
        if seen is not None:
            return _reject(state, command, ReasonCode.DUPLICATE,
                           f"command {command.command_id} was already decided: {seen.outcome} at version "
                           f"{seen.version}", original=seen)
    live = state is not None and state.exists
    deleted = state is not None and state.deleted
    if isinstance(command, CreateObject):
        if deleted:
            return _reject(state, command, ReasonCode.DELETED, f"object {command.object_id} was deleted; "
                           "ids are not reused")
        if live:
            return _reject(state, command, ReasonCode.ALREADY_EXISTS, f"object {command.object_id} exists")
        return _decide_create(state, command, limits)
    if deleted:
        return _reject(state, command, ReasonCode.DELETED, f"object {command.object_id} was deleted")
    if state is None or not live:
        return _reject(state, command, ReasonCode.NOT_FOUND, f"object {command.object_id} does not exist")
    allowed = command.principal == state.owner or (
        isinstance(command, UpdateObject) and command.principal in state.editors)
    if not allowed:
        who = "the owner or an editor" if isinstance(command, UpdateObject) else "the owner"
        return _reject(state, command, ReasonCode.FORBIDDEN, f"only {who} may do this")
    if command.expected_version is not None and command.expected_version != state.version:
        return _reject(state, command, ReasonCode.VERSION_CONFLICT,
                       f"expected version {command.expected_version}, current is {state.version}")
    problem = _check_payload(command, limits)
    if problem is not None:
        return _reject(state, command, *problem)
    return _decide_change(state, command, limits)


def _decide_create(state: ObjectState | None, command: CreateObject, limits: Limits) -> Decision:
    if command.expected_version is not None and command.expected_version != 0:
        return _reject(state, command, ReasonCode.VERSION_CONFLICT,
                       f"expected version {command.expected_version}, object does not exist (version 0)")
    problem = _check_payload(command, limits)
    if problem is not None:
        return _reject(state, command, *problem)
    return _accept(state, command, EventType.CREATED, limits, owner=command.principal, editors=(),
                   document_size=command.size, document=command.document)


def _decide_change(state: ObjectState, command: Command, limits: Limits) -> Decision:
    owner, editors, size = state.owner, state.editors, state.document_size
    if isinstance(command, UpdateObject):
        return _accept(state, command, EventType.UPDATED, limits, owner=owner, editors=editors,
                       document_size=size, patch=command.patch)
    if isinstance(command, DeleteObject):
        return _accept(state, command, EventType.DELETED, limits, owner=owner, editors=(), document_size=size,
                       deleted=True)
    if isinstance(command, GrantEditor):
        if command.editor == owner or command.editor in editors:
            return _reject(state, command, ReasonCode.ALREADY_EXISTS, f"{command.editor} may already edit")
        if len(editors) >= limits.max_editors:
            return _reject(state, command, ReasonCode.TOO_LARGE,
                           f"object already has the maximum of {limits.max_editors} editors")
        return _accept(state, command, EventType.EDITOR_GRANTED, limits, owner=owner,
                       editors=(*editors, command.editor), document_size=size, editor=command.editor)
    if isinstance(command, RevokeEditor):
        if command.editor not in editors:
            return _reject(state, command, ReasonCode.NOT_FOUND, f"{command.editor} is not an editor")
        return _accept(state, command, EventType.EDITOR_REVOKED, limits, owner=owner,
                       editors=tuple(e for e in editors if e != command.editor), document_size=size,
                       editor=command.editor)
    raise TypeError(f"not a command: {type(command).__name__}")  # pragma: no cover - exhaustive union
