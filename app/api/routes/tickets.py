"""``POST /changes/tickets``: trade a bearer token for a change-feed ticket a browser's ``EventSource`` can use."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.api.deps import ReaderDep, caller_of
from app.api.problems import PROBLEM_RESPONSES, RATE_LIMITED_RESPONSE

router = APIRouter(tags=["changes"])


class TicketIssued(BaseModel):
    ticket: str = Field(description="Send as `?ticket=` on GET /changes or GET /objects/{id}/changes")
    expires_in: float = Field(description="Seconds left to open the first stream with it")


@router.post("/changes/tickets", status_code=201, response_model=TicketIssued,
             responses={401: PROBLEM_RESPONSES[401], 403: PROBLEM_RESPONSES[403], **RATE_LIMITED_RESPONSE},
             summary="A short-lived, single-use ticket for the change feed (for browsers' EventSource)")
async def issue_ticket(request: Request, principal: ReaderDep) -> JSONResponse:
    """The ticket opens one stream as the caller (read scope only) within ARBITER_CHANGES_TICKET_TTL_S; the
    browser's own reconnects of that stream (same URL, `Last-Event-ID`) are admitted with it while no other stream
    of it is open and within ARBITER_CHANGES_TICKET_RESUME_S of the last one's end. Costs one read."""
    ticket, ttl = request.app.state.tickets.issue(caller_of(request))
    return JSONResponse({"ticket": ticket, "expires_in": round(ttl, 3)}, status_code=201,
                        headers={"Cache-Control": "no-store"})
