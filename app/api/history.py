"""The query side's history and lists: pages of an object's events, its document as of a version, and the objects
a caller may read. The routes are in ``app.api.routes.objects``; the stores are the read model's
(``projections.db.history``, ``projections.db.lists``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.api import json_out
from commands.rejection import clip
from projections.audit.outcomes import OwnRejections
from projections.db.history import HistoryEntry, entry_json
from projections.db.lists import ListItem, Page

#: Bytes of event entries past which a page stops (after at least one event): a page of 10 MB documents stays small.
PAGE_BYTES = 4 * 1024 * 1024

_strict_json = json_out.encode  # the one JSON rule of every way a document leaves the API


class HistoryEvent(BaseModel):
    type: str = Field(description="CREATED, UPDATED, DELETED, EDITOR_/READER_GRANTED/REVOKED")
    version: int = Field(description="The version the event made")
    principal: str = Field(description="Who sent the command")
    at: str = Field(description="The command's issued_at (ISO 8601)")
    command_id: str
    document: dict[str, Any] | None = Field(default=None, description="CREATED: the document")
    patch: dict[str, Any] | None = Field(default=None, description="UPDATED: the JSON merge patch")
    editor: str | None = Field(default=None, description="EDITOR_GRANTED/REVOKED: the grantee")
    reader: str | None = Field(default=None, description="READER_GRANTED/REVOKED: the grantee")


class OwnRejection(BaseModel):
    command_id: str | None
    reason: str = Field(description="The reason code (VERSION_CONFLICT, FORBIDDEN, …)")
    message: str
    version: int | None = Field(description="The object's version when the command was rejected")
    at: str | None = Field(description="The command's issued_at (ISO 8601)")


class EventPage(BaseModel):
    object_id: str
    events: list[HistoryEvent] = Field(description="Oldest first, after `after_version`")
    next_after_version: int | None = Field(description="Send as `after_version` for the next page; null at the end")
    rejections: list[OwnRejection] | None = Field(default=None, description=(
        "With `include=rejections`: the caller's own rejected commands about the object whose version at rejection "
        "falls in this page's window (from `after_version` up to the page's last event; the last page takes the rest), "
        "by version: at most `app.limits.OWN_REJECTIONS_PER_PAGE` of them are read"))
    rejections_truncated: bool | None = Field(default=None, description=(
        "With `include=rejections`: true when the window holds more of the caller's rejections than a page reads "
        "(`app.limits.OWN_REJECTIONS_PER_PAGE`); a smaller `limit` narrows the window"))


class ListedObject(BaseModel):
    id: str
    version: int
    updated_at: str = Field(description="When its last event's command was issued (ISO 8601, UTC)")


class ObjectPage(BaseModel):
    items: list[ListedObject] = Field(description="Ordered by (updated_at, id), oldest change first")
    next_cursor: str | None = Field(description="Send as `cursor` for the next page; null at the end")


def page_events(entries: list[HistoryEntry], limit: int) -> tuple[list[dict[str, Any]], bool, int | None]:
    """Return (the events of one page of ``entries``, read as ``limit + 1``; whether more follow; the version before
    which the page's rejections fall, None for the last page). A page stops early past ``PAGE_BYTES``."""
    events: list[dict[str, Any]] = []
    size, more = 0, False
    for entry in entries[:limit]:
        if events and size + len(entry.data) > PAGE_BYTES:
            more = True
            break
        size += len(entry.data)
        e = entry_json(entry.data)
        for name in ("document", "patch"):
            if name in e:
                e[name] = json_out.parse(e[name])
        events.append(e)
    more = more or len(events) < len(entries)
    last = events[-1]["version"] if events else None
    return events, more, last if more and last is not None else None


def event_page(object_id: str, events: list[dict[str, Any]], more: bool, after_version: int,
               own: OwnRejections | None) -> bytes:
    """Return the JSON body of one page of events (``page_events``) and, if asked for, the caller's rejections."""
    last = events[-1]["version"] if events else None
    body: dict[str, Any] = {"object_id": object_id, "events": events,
                            "next_after_version": last if more else None}
    if own is not None:
        high = last if more and last is not None else None
        body["rejections"] = [
            {"command_id": r.command_id, "reason": str(r.reason), "message": clip(r.message, 300),
             "version": r.current_version, "at": r.occurred_at.isoformat() if r.occurred_at else None}
            for r in own.rejections if (r.current_version or 0) >= after_version
            and (high is None or (r.current_version or 0) < high)]
        body["rejections_truncated"] = own.truncated
    return _strict_json(body).encode("utf-8")


def object_page(page: Page, cursor: Callable[[ListItem], str]) -> bytes:
    """Return the JSON body of one list page; ``cursor`` makes the cursor after an item (``app.api.cursors``)."""
    body = {"items": [{"id": i.id, "version": i.version, "updated_at": i.updated_at} for i in page.items],
            "next_cursor": cursor(page.items[-1]) if page.more and page.items else None}
    return _strict_json(body).encode("utf-8")


RoleName = Literal["owner", "editor", "reader"]
