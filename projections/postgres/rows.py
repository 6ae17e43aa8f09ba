"""Rows of the ``documents`` table as ``ObjectView``s, and views as ``COPY`` text for the staging table."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from psycopg import sql

from commands import Event
from projections.db import fastjson
from projections.db.view import ObjectView

#: The columns a reader selects, in ``from_row``'s order; the document comes back as text for fastjson.
COLUMNS = sql.SQL("id, version, deleted, owner, editors, readers, document::text, updated_at")

_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def from_row(row: tuple[Any, ...]) -> tuple[str, ObjectView]:
    """Return ``(id, view)`` for a row selected with ``COLUMNS``."""
    oid, version, deleted, owner, editors, readers, document, updated_at = row
    at = updated_at.isoformat() if isinstance(updated_at, datetime) else updated_at
    return oid, ObjectView(fastjson.loads(document), version, deleted, owner, at, tuple(editors), tuple(readers))


def nul_problem(view: ObjectView, event: Event) -> str | None:
    """Return why ``view`` cannot go into jsonb or text columns (a U+0000 in a string), else None.

    A view gets a U+0000 only from the event that made it (the view it was applied to was stored, so had none),
    and JSON text can carry one only escaped: the view is serialised, once, only when the event's text holds one.
    """
    texts = (event.document or "") + (event.patch or "")
    if "\\u0000" not in texts and "\x00" not in event.object_id + event.owner + (event.editor or "") + (event.reader or ""):
        return None
    data = view.to_bytes()
    if (b"\\u0000" in data and _NUL.search(data) is not None) or b"\x00" in data:
        return "the document holds U+0000, which PostgreSQL's jsonb cannot store"
    return None


def copy_line(object_id: str, data: bytes) -> bytes:
    """One line of ``COPY stage (id, v) FROM STDIN`` text format: the id and the view's canonical JSON."""
    key = object_id.encode()
    if b"\\" in key or b"\t" in key or b"\n" in key or b"\r" in key:
        key = key.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\r", b"\\r")
    # JSON text has no raw tab, newline or carriage return; only its backslashes need escaping for COPY.
    return key + b"\t" + data.replace(b"\\", b"\\\\") + b"\n"
