"""Fold one event into an object's view, idempotent by version; pure, used by the DB projection."""

from __future__ import annotations

import re
from dataclasses import replace
from enum import StrEnum
from typing import NamedTuple

from commands import Event, EventType, merge_patch
from commands.json_text import DEFAULT_MAX_DEPTH, id_problem, value_problem
from projections.db import fastjson
from projections.db.view import ObjectView

_EXPONENT = re.compile(r"[0-9][eE]")


class Status(StrEnum):
    """What applying an event did."""

    APPLIED = "APPLIED"
    STALE = "STALE"          # version <= stored: already applied (a duplicate or a replayed batch); no-op
    GAP = "GAP"              # events are missing (version > stored + 1, or no CREATED first): the view is marked
                             # stale and kept at its version, except that a DELETED still lands; reported
    INVALID = "INVALID"      # the event cannot be applied as sent (its document breaks ``commands.json_text``, an
                             # event after the deletion): what can land lands (version, roles, deletion), the
                             # document is quarantined; reported


class ApplyResult(NamedTuple):
    """What applying an event did, and the view after it (the unchanged view when nothing landed)."""

    status: Status
    view: ObjectView | None
    detail: str = ""


def _unservable(text: str | None, value: object) -> str | None:
    """Return why ``value`` (parsed from ``text``) breaks the rule of ``commands.json_text``, or None.

    The validator refuses such payloads; this catches events written before a rule existed or by another producer.
    """
    if text is None:
        return None
    if "\\u" not in text and "NaN" not in text and "Infinity" not in text and _EXPONENT.search(text) is None \
            and text.count("{") + text.count("[") <= DEFAULT_MAX_DEPTH:
        return None  # no escape, no NaN/Infinity, no exponent, shallow: nothing to check
    problem = value_problem(value, DEFAULT_MAX_DEPTH)
    return None if problem is None else f"holds {problem}"


def _parsed(text: str | None, what: str) -> tuple[dict[str, object] | None, str]:
    """Return (the JSON object in ``text``, "") or (None, why it cannot be applied)."""
    try:
        value = fastjson.loads(text or "")
    except ValueError as e:
        return None, f"{what} is not JSON: {e}"
    if not isinstance(value, dict):
        return None, f"{what} is not a JSON object"
    problem = _unservable(text, value)
    if problem is not None:
        return None, f"{what} {problem}"
    return value, ""


def _ids_problem(event: Event) -> str | None:
    for name, value in (("owner", event.owner), ("editor", event.editor), ("reader", event.reader)):
        problem = id_problem(name, value) if value is not None else None
        if problem is not None:
            return problem
    return None


def _gap(view: ObjectView | None, event: Event, at: str, detail: str) -> ApplyResult:
    """Events are missing before ``event`` (or it names no principal): the view can no longer be trusted. It is
    marked stale at its version; a deletion is final and needs nothing before it, so a DELETED still lands."""
    base = view if view is not None else ObjectView({}, 0, owner=event.owner if "\x00" not in event.owner else "")
    if event.type is EventType.DELETED:
        return ApplyResult(Status.GAP, replace(base, document={}, version=event.version, deleted=True, updated_at=at,
                                               stale=True), detail)
    return ApplyResult(Status.GAP, base if base.stale else replace(base, stale=True), detail)


def apply_event(view: ObjectView | None, event: Event) -> ApplyResult:
    """Return the view after ``event``: CREATED sets the document, UPDATED merge-patches it, DELETED tombstones it
    (roles kept), EDITOR_/READER_GRANTED/REVOKED change the roles; every event sets the version.

    Access and lifecycle always land: an event whose document or patch breaks ``commands.json_text`` still sets
    the version (and the owner), and the view is quarantined instead of frozen, so later grants, revokes and the
    deletion apply.
    """
    stored = view.version if view is not None else 0
    if event.version <= stored:
        return ApplyResult(Status.STALE, view)
    at = event.occurred_at.isoformat()
    if event.version > stored + 1:
        return _gap(view, event, at, f"stored version {stored}, event version {event.version}")
    if view is not None and view.deleted:
        return ApplyResult(Status.INVALID, view, f"{event.type.value} on a deleted object")
    ids_problem = _ids_problem(event)
    if ids_problem is not None:
        return _gap(view, event, at, f"{event.type.value} {ids_problem}")
    if event.type is EventType.CREATED:
        doc, problem = _parsed(event.document, "CREATED document")
        if doc is None:
            return ApplyResult(Status.INVALID, ObjectView({}, event.version, False, event.owner, at, quarantined=True),
                               problem)
        return ApplyResult(Status.APPLIED, ObjectView(doc, event.version, False, event.owner, at))
    if view is None:
        return _gap(view, event, at, f"{event.type.value} on a missing object")
    q, st = view.quarantined, view.stale
    editors, readers = view.editors, view.readers
    if event.type is EventType.UPDATED:
        patch, problem = _parsed(event.patch, "UPDATED patch")
        doc = merge_patch(view.document, patch) if patch is not None else view.document
        if patch is not None and not isinstance(doc, dict):  # pragma: no cover - a JSON object patch keeps an object
            doc, problem = view.document, "UPDATED patch would replace the document with a non-object"
        if problem:
            return ApplyResult(Status.INVALID, replace(view, version=event.version, owner=event.owner, updated_at=at,
                                                       quarantined=True), problem)
        view = ObjectView(doc, event.version, False, event.owner, at, editors, readers, q, st)
        return ApplyResult(Status.APPLIED, view)
    if event.type is EventType.DELETED:
        return ApplyResult(Status.APPLIED, ObjectView({}, event.version, True, event.owner, at, editors, readers, q, st))
    who = event.editor if event.type in (EventType.EDITOR_GRANTED, EventType.EDITOR_REVOKED) else event.reader
    if who is None:
        return _gap(view, event, at, f"{event.type.value} without the principal it names")
    if event.type is EventType.EDITOR_GRANTED:
        editors = editors if who in editors else (*editors, who)
    elif event.type is EventType.EDITOR_REVOKED:
        editors = tuple(e for e in editors if e != who)
    elif event.type is EventType.READER_GRANTED:
        readers = readers if who in readers else (*readers, who)
    elif event.type is EventType.READER_REVOKED:
        readers = tuple(r for r in readers if r != who)
    return ApplyResult(Status.APPLIED, ObjectView(view.document, event.version, False, event.owner, at, editors,
                                                  readers, q, st))
