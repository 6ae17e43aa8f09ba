"""Rows of the ``documents`` table as ``ObjectView``s, and views as ``COPY`` text for the staging table."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import sql

from projections.db import fastjson
from projections.db.view import ObjectView, StoredView

#: The columns a reader selects, in ``from_row``'s order; the document comes back as text for fastjson.
COLUMNS = sql.SQL("id, version, deleted, owner, editors, readers, document::text, updated_at, quarantined, stale")


def from_row(row: tuple[Any, ...]) -> tuple[str, ObjectView]:
    """Return ``(id, view)`` for a row selected with ``COLUMNS``."""
    oid, version, deleted, owner, editors, readers, document, updated_at, quarantined, stale = row
    at = updated_at.isoformat() if isinstance(updated_at, datetime) else updated_at
    return oid, ObjectView(fastjson.loads(document), version, deleted, owner, at, tuple(editors), tuple(readers),
                           quarantined, stale)


def stored_from_row(row: tuple[Any, ...]) -> StoredView:
    """Return the lazily-decoded view of a row selected with ``COLUMNS`` (its document text left undecoded)."""
    _, version, deleted, owner, editors, readers, document, updated_at, quarantined, stale = row
    at = updated_at.isoformat() if isinstance(updated_at, datetime) else updated_at
    return StoredView(document, version, deleted, owner, at, tuple(editors), tuple(readers), quarantined, stale)


def _copy_text(text: str) -> str:
    """Escape a value for COPY's text format (backslash, tab, newline, carriage return)."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def _array(items: tuple[str, ...]) -> str:
    """A text[] literal: every element double-quoted, its backslashes and quotes escaped."""
    if not items:
        return "{}"
    return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items) + "}"


def copy_line(object_id: str, view: ObjectView) -> str:
    """One line of ``COPY stage FROM STDIN`` (text format) in the ``documents`` table's column order.

    Typed columns, not one JSON value unpacked by the server: the server then parses only the document.
    """
    doc = fastjson.dumps(view.document).decode()
    return "\t".join((
        _copy_text(object_id), str(view.version), "t" if view.deleted else "f", _copy_text(view.owner),
        _copy_text(_array(view.editors)), _copy_text(_array(view.readers)), _copy_text(doc),
        "\\N" if view.updated_at is None else _copy_text(view.updated_at), "t" if view.quarantined else "f",
        "t" if view.stale else "f")) + "\n"
