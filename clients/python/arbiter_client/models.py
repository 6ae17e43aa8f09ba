"""What the client returns: the outcomes of writes, documents with their versions, list and history items, changes.

Hand-written frozen dataclasses over the API's JSON (field names as the server's response models name them;
``tests/unit/test_client_codes.py`` compares them with the OpenAPI document).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class Accepted:
    """The validator accepted the command: the object is now at ``version``.

    ``position`` (``events:<partition>:<offset>``, the ``Arbiter-Position`` header) is where its event is; the
    client sends it back on later reads (read-your-writes). None when the server did not know it.
    """

    command_id: str
    object_id: str
    version: int
    event: str | None = None
    position: str | None = None


@dataclass(frozen=True, slots=True)
class Queued:
    """The command is durably on the commands topic but not decided yet (``wait`` was 0 or ran out)."""

    command_id: str
    object_id: str
    partition: int
    offset: int
    location: str


@dataclass(frozen=True, slots=True)
class Document:
    """An object's document as the read model serves it, at ``version`` (its ETag)."""

    object_id: str
    version: int
    document: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ListedObject:
    """One item of ``GET /objects``: read its document with ``get``."""

    id: str
    version: int
    updated_at: str


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One event of an object's history (``GET /objects/{id}/events``)."""

    type: str
    version: int
    principal: str
    at: str
    command_id: str
    document: dict[str, Any] | None = None
    patch: dict[str, Any] | None = None
    editor: str | None = None
    reader: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """One frame of the change feed: ``kind`` is ``change`` or ``access-revoked``; ``id`` resumes after it."""

    kind: str
    id: str | None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def object_id(self) -> str:
        return str(self.data.get("object_id", ""))

    @property
    def version(self) -> int:
        return int(self.data.get("version", 0))

    @property
    def type(self) -> str | None:
        """The event type of a ``change`` (CREATED, UPDATED, DELETED, …); None for ``access-revoked``."""
        t = self.data.get("type")
        return t if isinstance(t, str) else None


def fields_of(cls: type) -> tuple[str, ...]:
    """Return the field names of one of these dataclasses (for the drift test against the OpenAPI document)."""
    return tuple(f.name for f in fields(cls))
