"""An object's history as the read model keeps it: every event that moved its view, stored beside the view.

The DB projection stores an event here exactly when ``apply_event`` moved the object's version (``APPLIED``, an
``INVALID`` event whose version landed, a deletion after a gap), in the same atomic write as the view. Folding
the stored events of an object in version order with the same ``apply_event`` therefore makes the projection's
very calls again, and ends at the same view, byte for byte (``tests/unit/test_projection_history.py``). Events
that moved nothing (replays at or below the stored version, a gap that only marked the view stale) are not
history: the gap report keeps the latter, and a stale view is never served.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from commands import Event, EventType
from projections.db import fastjson
from projections.db.apply import apply_event
from projections.db.view import ObjectView

# What an entry keeps of its event: what folding it needs and what the API shows. Not the token's issuer and jti,
# which the audit trail keeps.
_OPTIONAL = ("document", "patch", "editor", "reader")


class HistoryEntry(NamedTuple):
    """One stored event of an object: its version and the entry's bytes (``entry_bytes``)."""

    version: int
    data: bytes


def entry_bytes(event: Event) -> bytes:
    """Return the stored bytes of ``event``: canonical JSON, so the same event always stores the same bytes."""
    d: dict[str, Any] = {"id": event.event_id, "type": event.type.value, "version": event.version,
                         "command_id": event.command_id, "principal": event.principal,
                         "at": event.occurred_at.isoformat(), "owner": event.owner}
    for name in _OPTIONAL:
        value = getattr(event, name)
        if value is not None:
            d[name] = value
    return fastjson.dumps(d)


def entry_event(object_id: str, data: bytes) -> Event:
    """Return the event an entry of ``object_id`` was made from (the fields folding needs)."""
    d = fastjson.loads(data)
    return Event(event_id=d["id"], type=EventType(d["type"]), object_id=object_id, version=d["version"],
                 command_id=d["command_id"], principal=d["principal"], occurred_at=datetime.fromisoformat(d["at"]),
                 owner=d["owner"], **{name: d.get(name) for name in _OPTIONAL})


def entry_json(data: bytes) -> dict[str, Any]:
    """Return an entry as the API shows it: type, version, principal, time and the document or patch or grantee."""
    d = fastjson.loads(data)
    out: dict[str, Any] = {"type": d["type"], "version": d["version"], "principal": d["principal"], "at": d["at"],
                           "command_id": d["command_id"]}
    for name in _OPTIONAL:
        if name in d:
            out[name] = d[name]
    return out


def fold(object_id: str, entries: Iterable[HistoryEntry], up_to: int | None = None) -> ObjectView | None:
    """Return the view after the entries (in version order) up to version ``up_to``, as the projection folded it."""
    view: ObjectView | None = None
    for entry in entries:
        if up_to is not None and entry.version > up_to:
            break
        view = apply_event(view, entry_event(object_id, entry.data)).view
    return view


def moved(before: ObjectView | None, after: ObjectView | None) -> bool:
    """Return True if applying an event took the view from ``before`` to a new version (history keeps it)."""
    return after is not None and after.version > (before.version if before is not None else 0)
