"""Fold one event into an object's view, idempotent by version; pure, used by the DB projection."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import NamedTuple

from commands import Event, EventType, merge_patch
from projections.db import fastjson
from projections.db.view import ObjectView


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


def _unstorable(text: str | None, value: object) -> bool:
    """True if ``value`` (parsed from ``text``) holds an escaped lone surrogate, which UTF-8 cannot store."""
    if text is None or "\\u" not in text:
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def apply_event(view: ObjectView | None, event: Event) -> ApplyResult:
    """Return the view after ``event``: CREATED sets the document, UPDATED merge-patches it, DELETED tombstones it,
    EDITOR_GRANTED/REVOKED only bump the version."""
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
        if _unstorable(event.document, doc):
            return ApplyResult(Status.INVALID, view, "CREATED document holds a lone surrogate")
        return ApplyResult(Status.APPLIED, ObjectView(doc, event.version, False, event.owner, at))
    if view is None or view.deleted:
        return ApplyResult(Status.INVALID, view, f"{event.type.value} on a {'deleted' if view else 'missing'} object")
    if event.type is EventType.UPDATED:
        try:
            patch = fastjson.loads(event.patch or "")
        except ValueError as e:
            return ApplyResult(Status.INVALID, view, f"UPDATED patch is not JSON: {e}")
        if _unstorable(event.patch, patch):
            return ApplyResult(Status.INVALID, view, "UPDATED patch holds a lone surrogate")
        doc = merge_patch(view.document, patch)
        if not isinstance(doc, dict):
            return ApplyResult(Status.INVALID, view, "UPDATED patch would replace the document with a non-object")
        return ApplyResult(Status.APPLIED, ObjectView(doc, event.version, False, event.owner, at))
    if event.type is EventType.DELETED:
        return ApplyResult(Status.APPLIED, ObjectView({}, event.version, True, event.owner, at))
    return ApplyResult(Status.APPLIED, ObjectView(view.document, event.version, False, event.owner, at))
