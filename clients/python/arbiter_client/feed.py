"""The change feed without I/O: a Server-Sent Events parser and the rules for resuming a stream by ``Last-Event-ID``.

The sync and async clients feed it the stream's lines and ask it what to do when the stream ends or fails, so
the resume logic is the same for both and tested without a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from arbiter_client.errors import ChangesExpired
from arbiter_client.models import Change


@dataclass(slots=True)
class SseParser:
    """Turns lines of ``text/event-stream`` into (event, data, id) messages (the WHATWG parsing rules we need)."""

    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def line(self, line: str) -> tuple[str, str, str | None] | None:
        """Take one line (without its end); return a message when a blank line completes one."""
        if not line:
            if not self._data:
                self._event, self._id = "", None
                return None
            msg = (self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data, self._id = "", [], None
            return msg
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


class FeedCursor:
    """Where a change stream is, and whether it goes on: the last frame's id and how the last stream ended."""

    def __init__(self, object_id: str | None, last_event_id: str | None) -> None:
        self.object_id = object_id
        self.last_event_id = last_event_id
        self.finished = False  # the object's stream ended for good (deleted, or access revoked)
        self.resets = 0

    def ended(self) -> bool:
        """Return True once an object's stream ended for good (a method: it changes while a stream is read)."""
        return self.finished

    def headers(self) -> dict[str, str]:
        h = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_event_id:
            h["Last-Event-ID"] = self.last_event_id
        return h

    def take(self, event: str, data: str, sse_id: str | None) -> Change | None:
        """Return the ``Change`` of one message (None for anything else).

        A ``reset`` (the server ended the stream: SLOW_CONSUMER, ROLES_UNKNOWN, TOKEN_EXPIRED, SHUTDOWN, FEED_ERROR)
        moves the cursor to its ``resume_from`` and the stream is opened again from there; CHANGES_EXPIRED cannot
        be resumed and is raised as ``ChangesExpired``.
        """
        if sse_id is not None:
            self.last_event_id = sse_id or None
        if event == "reset":
            body = json.loads(data) if data else {}
            code = str(body.get("code", ""))
            if code == "CHANGES_EXPIRED":
                raise ChangesExpired(str(body.get("detail", code)), code=code, problem=body)
            if body.get("resume_from"):
                self.last_event_id = str(body["resume_from"])
            self.resets += 1
            return None
        if event not in ("change", "access-revoked"):
            return None
        change = Change(event, sse_id, json.loads(data))
        if self.object_id is not None and (event == "access-revoked" or change.type == "DELETED"):
            self.finished = True  # the server ends an object's stream after these
        return change
