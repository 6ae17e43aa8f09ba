"""The Server-Sent Events frames of the change feed: ``change``, ``access-revoked``, ``reset`` and heartbeats."""

from __future__ import annotations

from typing import Any

from app.api import json_out
from commands import Event

#: A comment line: keeps an idle connection (and any proxy in between) from timing out; clients ignore it.
HEARTBEAT = b": keepalive\n\n"


def event_data(event: Event) -> bytes:
    """Return the JSON of one event as a ``change`` frame carries it (no newline: one ``data:`` line).

    The document and patch follow ``app.api.json_out``, as ``GET`` serves them (big integers exact); one that
    JSON cannot say (NaN, stored before such documents were refused) is left out and ``error`` says
    ``UNSERVABLE_DOCUMENT``, as ``GET`` answers it.
    """
    body: dict[str, Any] = {
        "object_id": event.object_id, "type": event.type.value, "version": event.version,
        "event_id": event.event_id, "command_id": event.command_id, "principal": event.principal,
        "occurred_at": event.occurred_at.isoformat(), "owner": event.owner}
    # the document and patch are JSON text: parsed and written again compactly, so a newline in the stored text
    # can never end the data line
    if event.editor is not None:
        body["editor"] = event.editor
    if event.reader is not None:
        body["reader"] = event.reader
    try:
        if event.document is not None:
            body["document"] = json_out.parse(event.document)
        if event.patch is not None:
            body["patch"] = json_out.parse(event.patch)
        return json_out.dumps(body)
    except ValueError:
        body.pop("document", None)
        body.pop("patch", None)
        return json_out.dumps({**body, "error": "UNSERVABLE_DOCUMENT"})


def revoked_data(event: Event) -> bytes:
    """Return the JSON of an ``access-revoked`` frame: which object, and the version at which access ended."""
    return json_out.dumps({"object_id": event.object_id, "version": event.version})


def frame(kind: str, data: bytes, sse_id: str | None = None) -> bytes:
    """Return one SSE message; ``sse_id`` None leaves the client's last event id as it was."""
    head = f"id: {sse_id}\n" if sse_id is not None else ""
    return f"{head}event: {kind}\ndata: ".encode() + data + b"\n\n"


def reset(code: str, detail: str, last_id: str | None) -> bytes:
    """Return the final ``reset`` frame: the stream ends here; resume with ``Last-Event-ID`` = ``last_id``."""
    return frame("reset", json_out.dumps({"code": code, "detail": detail, "resume_from": last_id}))
