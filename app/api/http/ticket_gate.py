"""ASGI layer admitting the change feed's two routes by ``?ticket=`` (``app.api.callers.tickets``), and nothing else by it.

A request with a ``ticket`` query parameter has it removed from ``scope["query_string"]`` before anything else
sees the request, so no later layer, route, trace or uvicorn's access log (which formats the same scope) holds it.
On ``GET /changes`` and ``GET /objects/{id}/changes`` the ticket is redeemed and its caller put where
``app.api.deps.caller_of`` finds it, so the routes run as for a bearer token (read scope only); the stream's hold
on the ticket is released when the answer ends, and while it runs the hold records each second that it sent
something (so a reconnect after the API process died is resumable). Anywhere else a ticket is a 400: it is not a credential there.
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.callers.auth import Unauthorized
from app.api.callers.tickets import TicketBook
from app.api.deps import CALLER_SCOPE_KEY
from app.api.problems import problem

PARAM = "ticket"
#: How often a running stream records that it is alive (``Redemption.touch``): after its process dies, the browser's
#: reconnect is admitted within the resume window of the last record, at most this much before the death.
TOUCH_EVERY_S = 1.0
_FEED = re.compile(r"^/(?:changes|objects/[^/]+/changes)$")


class TicketGate:
    """Redeem ``?ticket=`` on the change feed's routes (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, book: TicketBook) -> None:
        self.app = app
        self.book = book

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query: bytes = scope.get("query_string", b"")
        if scope["type"] != "http" or PARAM.encode() not in query:
            await self.app(scope, receive, send)
            return
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        tickets = [v for k, v in pairs if k == PARAM]
        if not tickets:
            await self.app(scope, receive, send)
            return
        scope["query_string"] = urlencode([(k, v) for k, v in pairs if k != PARAM]).encode("latin-1")
        path = scope["path"]
        if scope["method"] not in ("GET", "HEAD") or not _FEED.match(path):
            await problem(400, "BAD_REQUEST", "a ticket is accepted on GET /changes and GET /objects/{id}/changes "
                          "only", instance=path)(scope, receive, send)
            return
        names = {name for name, _ in scope["headers"]}
        if len(tickets) > 1 or b"authorization" in names:
            await problem(400, "BAD_REQUEST", "send one ticket, or a bearer token, not both",
                          instance=path)(scope, receive, send)
            return
        try:
            ticket, hold = self.book.redeem(tickets[0], resuming=b"last-event-id" in names)
        except Unauthorized as e:
            await problem(401, e.code, e.message, instance=path,
                          headers={"WWW-Authenticate": e.www_authenticate})(scope, receive, send)
            return
        scope[CALLER_SCOPE_KEY] = ticket.caller()
        if ticket.resume_from is not None and b"last-event-id" not in names:  # a new ticket picking up where one ended
            scope["headers"] = [*scope["headers"], (b"last-event-id", ticket.resume_from.encode("latin-1"))]
        last = 0.0

        async def send_alive(message: Message) -> None:
            nonlocal last
            await send(message)
            if message["type"] == "http.response.body":  # a frame or heartbeat went out: the stream is alive
                now = time.time()
                if now - last >= TOUCH_EVERY_S:
                    last = now
                    hold.touch(now)

        try:
            await self.app(scope, receive, send_alive)
        finally:
            hold.close()
