"""The five commands a client can send about one object; immutable, validated for UTC timestamps."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from commands.timestamps import require_utc


def utf8_size(text: str) -> int:
    """Return the UTF-8 byte length of ``text`` without encoding it when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class _CommandBase:
    """Fields every command carries; ``issued_at`` is normalised to UTC and naive values are refused."""

    command_id: str
    object_id: str
    principal: str
    issued_at: datetime
    expected_version: int | None = None

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
    """Create an object from ``document``, the JSON text of an object; the sender becomes the owner."""

    document: str = field(kw_only=True)

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


Command = CreateObject | UpdateObject | DeleteObject | GrantEditor | RevokeEditor
