"""Lists of the objects a principal may read: roles, the keyset cursor on ``(updated_at, id)``, and one page.

Both read-model backends keep an access index (RocksDB: ``a`` keys beside the views; PostgreSQL: the ``access``
table) of rows ``(grantee, role, updated_at, id) -> version``, one for the owner and one per editor and reader
(a grantee may be ``group:<name>``), written in the same atomic write as the view and removed when the view's
roles or ``updated_at`` change. A deleted object and a stale view have no rows: deleted objects are not listed,
and a view whose roles cannot be trusted is listed to nobody. A page is read in ``(updated_at, id)`` order,
oldest change first, so ``updated_since`` and the cursor both mean "what changed after this".
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import NamedTuple

from commands.access import GROUP_PREFIX
from commands.errors import ArbiterError
from projections.db.view import ObjectView

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Role(StrEnum):
    """The role a grantee holds on an object, by its one-letter code in the index."""

    OWNER = "owner"
    EDITOR = "editor"
    READER = "reader"

    @property
    def code(self) -> str:
        return self.value[0]


class BadCursor(ArbiterError):
    """A list cursor that this API did not hand out."""

    code = "INVALID_CURSOR"


class ListItem(NamedTuple):
    """One object of a list page: enough to show it and to fetch it (its document is read with ``GET``)."""

    id: str
    version: int
    updated_us: int

    @property
    def updated_at(self) -> str:
        return iso(self.updated_us)


class Page(NamedTuple):
    items: list[ListItem]
    more: bool


def micros(at: str | None) -> int:
    """Return an ISO-8601 time (a view's ``updated_at``) as microseconds since the epoch (0 for none)."""
    if at is None:
        return 0
    t = datetime.fromisoformat(at)
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    d = t - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


#: The latest ``updated_at`` either read model can hold (Python's last microsecond, UTC): a list from later is empty.
MAX_US = micros(datetime.max.replace(tzinfo=UTC).isoformat())


def iso(us: int) -> str:
    """Return microseconds since the epoch as the ISO-8601 UTC time of ``micros``' inverse."""
    return datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000).isoformat()


def access_rows(view: ObjectView | None) -> set[tuple[str, Role]]:
    """Return the ``(grantee, role)`` rows ``view`` puts in the access index (none when deleted or stale)."""
    if view is None or view.deleted or view.stale:
        return set()
    rows = {(e, Role.EDITOR) for e in view.editors} | {(r, Role.READER) for r in view.readers}
    if view.owner:
        rows.add((view.owner, Role.OWNER))
    return rows


def grantees(principal: str, groups: tuple[str, ...], role: Role | None) -> list[tuple[str, Role]]:
    """Return the index ranges a page of ``principal`` (member of ``groups``) reads: ownership is never a group's."""
    roles = (role,) if role is not None else (Role.OWNER, Role.EDITOR, Role.READER)
    out = [(principal, r) for r in roles]
    out += [(GROUP_PREFIX + g, r) for g in groups for r in roles if r is not Role.OWNER]
    return out


def encode_cursor(item: ListItem) -> str:
    """Return the opaque cursor after ``item``."""
    raw = json.dumps([item.updated_us, item.id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """Return ``(updated_us, id)`` of a cursor from ``encode_cursor``; raise ``BadCursor`` for anything else."""
    try:
        us, oid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, TypeError) as e:
        raise BadCursor(f"cursor {cursor[:40]!r} was not handed out by this API") from e
    if type(us) is not int or type(oid) is not str or not 0 <= us <= MAX_US or "\x00" in oid:
        raise BadCursor(f"cursor {cursor[:40]!r} was not handed out by this API")
    try:
        oid.encode()
    except UnicodeEncodeError as e:  # a lone surrogate: no id holds one
        raise BadCursor(f"cursor {cursor[:40]!r} was not handed out by this API") from e
    return us, oid
