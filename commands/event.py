"""The one event record: what happened to an object, with a deterministic id and the command's own time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class EventType(StrEnum):
    """What an accepted command did."""

    CREATED = "CREATED"
    UPDATED = "UPDATED"
    DELETED = "DELETED"
    EDITOR_GRANTED = "EDITOR_GRANTED"
    EDITOR_REVOKED = "EDITOR_REVOKED"
    READER_GRANTED = "READER_GRANTED"
    READER_REVOKED = "READER_REVOKED"


@dataclass(frozen=True, slots=True)
class RuleWarning:
    """A rule in warn or audit mode that would have refused the command (``commands.rules.evaluate``).

    ``reason`` is the reason code the refusal would have had (RULE_VIOLATED or RULE_ERROR), ``mode`` the rule's.
    """

    rule: str
    mode: str
    reason: str
    message: str
    pointers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Event:
    """An accepted change; ``event_id`` is uuid5(object_id:version), ``occurred_at`` the command's issued_at.

    ``document`` is set for CREATED, ``patch`` for UPDATED, ``editor`` for EDITOR_GRANTED/EDITOR_REVOKED,
    ``reader`` for READER_GRANTED/READER_REVOKED.
    ``owner`` is the object's owner after the event.
    ``object_type`` is the type of the object (set on every event of a typed object); ``rules_version`` the version
    of the team's rules the command was decided under (None: decided with no rules; ``commands.rules``);
    ``warnings`` the rules in warn or audit mode that would have refused it, in the order they ran.
    """

    event_id: str
    type: EventType
    object_id: str
    version: int
    command_id: str
    principal: str
    occurred_at: datetime
    owner: str
    document: str | None = None
    patch: str | None = None
    editor: str | None = None
    reader: str | None = None
    issuer: str | None = None  # the iss and jti of the token that sent the command (the audit trail keeps them)
    jti: str | None = None
    object_type: str | None = None
    rules_version: int | None = None
    warnings: tuple[RuleWarning, ...] = ()
