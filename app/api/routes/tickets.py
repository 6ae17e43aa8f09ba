"""``POST /changes/tickets``: trade a bearer token for a change-feed ticket a browser's ``EventSource`` can use."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from app.api.changes import cursor
from app.api.deps import ReaderDep, caller_of
from app.api.problems import PROBLEM_RESPONSES, RATE_LIMITED_RESPONSE, ApiError
from app.api.tickets import RESUME_ID_CHARS

router = APIRouter(tags=["changes"])


class TicketRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    last_event_id: str | None = Field(default=None, max_length=RESUME_ID_CHARS, description=(
        "The id of the last frame the page received: the ticket's first stream resumes right after it (a new "
        "EventSource cannot send Last-Event-ID)"))


class TicketIssued(BaseModel):
    ticket: str = Field(description="Send as `?ticket=` on GET /changes or GET /objects/{id}/changes")
    expires_in: float = Field(description="Seconds left to open the first stream with it")


@router.post("/changes/tickets", status_code=201, response_model=TicketIssued,
             responses={400: PROBLEM_RESPONSES[400] | {"description": "BAD_REQUEST: a last_event_id this API did "
                                                       "not give out"},
                        401: PROBLEM_RESPONSES[401], 403: PROBLEM_RESPONSES[403], 422: PROBLEM_RESPONSES[422],
                        **RATE_LIMITED_RESPONSE},
             summary="A short-lived, single-use ticket for the change feed (for browsers' EventSource)")
async def issue_ticket(request: Request, principal: ReaderDep,
                       body: Annotated[TicketRequest | None, Body()] = None) -> JSONResponse:
    """The ticket opens one stream as the caller (read scope only) within ARBITER_CHANGES_TICKET_TTL_S; the
    browser's own reconnects of that stream (same URL, `Last-Event-ID`) are admitted with it while no other stream
    of it is open and within ARBITER_CHANGES_TICKET_RESUME_S of the last one's end. When a resume is refused, the
    page asks for a new ticket with `last_event_id` and subscribes again: no gap. Costs one read."""
    resume = body.last_event_id if body is not None else None
    if resume is not None:
        try:
            cursor.decode(resume)
        except cursor.BadCursor as e:
            raise ApiError(e.message, code="BAD_REQUEST") from e
    ticket, ttl = request.app.state.tickets.issue(caller_of(request), resume)
    return JSONResponse({"ticket": ticket, "expires_in": round(ttl, 3)}, status_code=201,
                        headers={"Cache-Control": "no-store"})
