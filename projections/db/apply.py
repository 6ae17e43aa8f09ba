"""Fold one event into an object's view, idempotent by version; pure, used by the DB projection."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple

from commands import Event, EventType, merge_patch
from commands.json_text import DEFAULT_MAX_DEPTH, value_problem
from projections.db import fastjson
from projections.db.view import ObjectView

_EXPONENT = re.compile(r"[0-9][eE]")


class Status(StrEnum):
    """What applying an event did."""

    APPLIED = "APPLIED"
    STALE = "STALE"          # version <= stored: already applied (a duplicate or a replayed batch); no-op
    GAP = "GAP"              # version > stored + 1: events are missing; not applied, reported
    INVALID = "INVALID"      # the event's payload cannot be applied (not JSON, DELETED object updated); not applied


class ApplyResult(NamedTuple):
    """What applying an event did, and the view after it (the unchanged view when not applied)."""

    status: Status
    view: ObjectView | None
    detail: str = ""


def _unservable(text: str | None, value: object) -> str | None:
    """Return why ``value`` (parsed from ``text``) could not be served back as RFC 8259 JSON, or None.

    The validator refuses such payloads (``commands.json_text``); this guards against events from elsewhere.
    """
    if text is None:
        return None
    if "\\u" not in text and "NaN" not in text and "Infinity" not in text and _EXPONENT.search(text) is None \
            and text.count("{") + text.count("[") <= DEFAULT_MAX_DEPTH:
        return None  # no escape, no NaN/Infinity, no exponent, shallow: nothing to check
    problem = value_problem(value, DEFAULT_MAX_DEPTH)
    return None if problem is None else f"holds {problem}"


def apply_event(view: ObjectView | None, event: Event) -> ApplyResult:
    """Return the view after ``event``: CREATED sets the document, UPDATED merge-patches it, DELETED tombstones it
    (roles kept), EDITOR_/READER_GRANTED/REVOKED change the roles; every event sets the version."""
    stored = view.version if view is not None else 0
    if event.version <= stored:
        return ApplyResult(Status.STALE, view)
    if event.version > stored + 1:
        return ApplyResult(Status.GAP, view, f"stored version {stored}, event version {event.version}")
    at = event.occurred_at.isoformat()
    if event.type is EventType.CREATED:
        try:
            doc = fastjson.loads(event.document or "")
        except ValueError as e:
            return ApplyResult(Status.INVALID, view, f"CREATED document is not JSON: {e}")
        if not isinstance(doc, dict):
            return ApplyResult(Status.INVALID, view, "CREATED document is not a JSON object")
        problem = _unservable(event.document, doc)
        if problem is not None:
            return ApplyResult(Status.INVALID, view, f"CREATED document {problem}")
        return ApplyResult(Status.APPLIED, ObjectView(doc, event.version, False, event.owner, at))
    if view is None or view.deleted:
        return ApplyResult(Status.INVALID, view, f"{event.type.value} on a {'deleted' if view else 'missing'} object")
    editors, readers = view.editors, view.readers
    if event.type is EventType.UPDATED:
        try:
            patch = fastjson.loads(event.patch or "")
        except ValueError as e:
            return ApplyResult(Status.INVALID, view, f"UPDATED patch is not JSON: {e}")
        problem = _unservable(event.patch, patch)
        if problem is not None:
            return ApplyResult(Status.INVALID, view, f"UPDATED patch {problem}")
        doc = merge_patch(view.document, patch)
        if not isinstance(doc, dict):
            return ApplyResult(Status.INVALID, view, "UPDATED patch would replace the document with a non-object")
        return ApplyResult(Status.APPLIED, ObjectView(doc, event.version, False, event.owner, at, editors, readers))
    if event.type is EventType.DELETED:
        return ApplyResult(Status.APPLIED, ObjectView({}, event.version, True, event.owner, at, editors, readers))
    who = event.editor if event.type in (EventType.EDITOR_GRANTED, EventType.EDITOR_REVOKED) else event.reader
    if who is None:
        return ApplyResult(Status.INVALID, view, f"{event.type.value} without the principal it names")
    if event.type is EventType.EDITOR_GRANTED:
        editors = editors if who in editors else (*editors, who)
    elif event.type is EventType.EDITOR_REVOKED:
        editors = tuple(e for e in editors if e != who)
    elif event.type is EventType.READER_GRANTED:
        readers = readers if who in readers else (*readers, who)
    elif event.type is EventType.READER_REVOKED:
        readers = tuple(r for r in readers if r != who)
    return ApplyResult(Status.APPLIED, ObjectView(view.document, event.version, False, event.owner, at, editors,
                                                  readers))
