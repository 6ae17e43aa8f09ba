"""ASGI layer admitting the change feed's two routes by ``?ticket=`` (``app.api.tickets``), and nothing else by it.

A request with a ``ticket`` query parameter has it removed from ``scope["query_string"]`` before anything else
sees the request, so no later layer, route, trace or uvicorn's access log (which formats the same scope) holds it.
On ``GET /changes`` and ``GET /objects/{id}/changes`` the ticket is redeemed and its caller put where
``app.api.deps.caller_of`` finds it, so the routes run as for a bearer token (read scope only); the stream's hold
on the ticket is released when the answer ends. Anywhere else a ticket is a 400: it is not a credential there.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.auth import Unauthorized
from app.api.deps import CALLER_SCOPE_KEY
from app.api.problems import problem
from app.api.tickets import TicketBook

PARAM = "ticket"
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
        try:
            await self.app(scope, receive, send)
        finally:
            hold.close()
