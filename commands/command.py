"""The seven commands a client can send about one object; immutable, validated for UTC timestamps."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from commands.timestamps import require_utc


def utf8_size(text: str) -> int:
    """Return the UTF-8 byte length of ``text`` without encoding it when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class _CommandBase:
    """Fields every command carries; ``issued_at`` is normalised to UTC and naive values are refused.

    ``groups`` are the sender's groups as its verified token named them (copied by the API, bounded), so that a
    grant to ``group:<name>`` is decided from the command alone; ``issuer`` and ``jti`` say which token sent it.
    """

    command_id: str
    object_id: str
    principal: str
    issued_at: datetime
    expected_version: int | None = None
    groups: tuple[str, ...] = field(default=(), kw_only=True)
    issuer: str | None = field(default=None, kw_only=True)
    jti: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        utc = require_utc(self.issued_at, "issued_at")
        if utc is not self.issued_at:
            object.__setattr__(self, "issued_at", utc)

    @property
    def size(self) -> int:
        """Return the UTF-8 size of the command's document or patch; 0 for commands without one."""
        return 0


@dataclass(frozen=True, slots=True)
class CreateObject(_CommandBase):
    """Create an object from ``document``, the JSON text of an object; the sender becomes the owner.

    ``object_type`` names the object's type in the team's rules (``commands.rules``); it is set only here and
    never changes. None (the default) is an untyped object, decided exactly as before rules existed.
    """

    document: str = field(kw_only=True)
    object_type: str | None = field(default=None, kw_only=True)

    @property
    def size(self) -> int:
        """Return the UTF-8 size of the document."""
        return utf8_size(self.document)


@dataclass(frozen=True, slots=True)
class UpdateObject(_CommandBase):
    """Apply ``patch``, the JSON text of an RFC 7386 merge patch (a JSON object), to the object."""

    patch: str = field(kw_only=True)

    @property
    def size(self) -> int:
        """Return the UTF-8 size of the patch."""
        return utf8_size(self.patch)


@dataclass(frozen=True, slots=True)
class DeleteObject(_CommandBase):
    """Delete the object for good; its id is never reused."""


@dataclass(frozen=True, slots=True)
class GrantEditor(_CommandBase):
    """Let ``editor`` update the object."""

    editor: str = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class RevokeEditor(_CommandBase):
    """Stop ``editor`` from updating the object."""

    editor: str = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class GrantReader(_CommandBase):
    """Let ``reader`` read the object (``GET /objects/{id}``)."""

    reader: str = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class RevokeReader(_CommandBase):
    """Stop ``reader`` from reading the object."""

    reader: str = field(kw_only=True)


Command = CreateObject | UpdateObject | DeleteObject | GrantEditor | RevokeEditor | GrantReader | RevokeReader


def fingerprint(command: Command) -> int:
    """Return a 64-bit digest of what the command asks for: kind, object, expected version and payload.

    Kept with each remembered command id, so a key reused for a *different* request is told apart from a
    retry (``IDEMPOTENCY_KEY_REUSED``). Not the principal or the time: a retry differs in ``issued_at``.
    A signed value, so it is an Avro long.
    """
    if isinstance(command, CreateObject):
        # The type is part of what a create asks for; untyped creates keep their fingerprint of before.
        payload = command.document if command.object_type is None else f"{command.object_type}\x00{command.document}"
    elif isinstance(command, UpdateObject):
        payload = command.patch
    elif isinstance(command, GrantEditor | RevokeEditor):
        payload = command.editor
    elif isinstance(command, GrantReader | RevokeReader):
        payload = command.reader
    else:
        payload = ""
    h = hashlib.blake2b(digest_size=8)
    ev = command.expected_version
    h.update(f"{type(command).__name__}\x00{command.object_id}\x00{'' if ev is None else ev}\x00".encode())
    h.update(payload.encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big", signed=True)
