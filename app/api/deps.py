"""Dependencies of the routes as ``Annotated`` aliases: the app context, the read model, the caller and its scopes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request

from app.api.callers.auth import METRICS, OPERATE, READ, Caller, authenticate_bearer
from app.api.problems import ApiError
from app.api.rules import RulesView
from app.api.telemetry.metrics import ApiMetrics
from app.api.writes.claims import KeyClaims
from app.api.writes.outcomes import OutcomeCache
from app.api.writes.producer import CommandProducer
from app.api.writes.quota import Quotas, refusal
from app.settings import Settings


class ObjectViewLike(Protocol):
    """What the API reads of an object: ``projections.db.ObjectView`` satisfies it."""

    @property
    def document(self) -> dict[str, Any]: ...
    @property
    def version(self) -> int: ...
    @property
    def deleted(self) -> bool: ...
    @property
    def owner(self) -> str: ...
    @property
    def editors(self) -> tuple[str, ...]: ...
    @property
    def readers(self) -> tuple[str, ...]: ...
    @property
    def quarantined(self) -> bool: ...
    @property
    def stale(self) -> bool: ...


class ReadModelPort(Protocol):
    """The DB projection's read side (``projections.db.ReadModel`` or ``projections.postgres.PgReadModel``, opened by
    ``app.read_models.open_reader``): None for an id never created."""

    def get(self, object_id: str) -> ObjectViewLike | None: ...


@dataclass(frozen=True, slots=True)
class ApiContext:
    """What the routes need of the running app, as one dependency (each FastAPI dependency costs per request)."""

    settings: Settings
    producer: CommandProducer
    outcomes: OutcomeCache
    metrics: ApiMetrics
    quotas: Quotas
    rules: RulesView | None = None  # the newest deployed rules, for the advisory pre-check of creates
    claims: KeyClaims | None = None  # Idempotency-Key claims (None: not checked, as in tests without a broker)



# Dependencies are async: a sync one would cost a threadpool hop per request.
async def _context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


async def _read_model(request: Request) -> ReadModelPort:
    rm: ReadModelPort | None = request.app.state.read_model
    if rm is None:
        raise ApiError("the read model is not open (is the DB projection running?)", code="READ_MODEL_UNAVAILABLE",
                       headers={"Retry-After": str(request.app.state.settings.retry_after_s)})
    return rm


#: Where ``authenticate`` leaves the ``Caller`` in the ASGI scope, so a request's token is verified once.
CALLER_SCOPE_KEY = "arbiter.caller"


async def authenticate(request: Request) -> Caller:
    """Return the ``Caller`` of the request's bearer token, verified once per request; raise ``Unauthorized``.

    A thin wrapper over ``app.api.callers.auth.authenticate_bearer``: the ``Caller`` (principal, scopes, groups, issuer,
    jti) is left in ``request.scope[CALLER_SCOPE_KEY]``, where ``caller_of`` finds it. ``StrictJsonRoute`` calls
    it before it reads a body, so a client without a valid token never gets its body read, parsed or validated.
    """
    known: Caller | None = request.scope.get(CALLER_SCOPE_KEY)
    if known is None:
        known = await authenticate_bearer(request.headers.get("authorization"), request.app.state.verifier)
        request.scope[CALLER_SCOPE_KEY] = known
    return known


def caller_of(request: Request) -> Caller:
    """Return the request's ``Caller``, which a dependency of its route (``authenticate``) already verified."""
    known: Caller | None = request.scope.get(CALLER_SCOPE_KEY)
    if known is None:
        raise RuntimeError(f"{request.url.path}: the route reads its caller before any dependency verified it")
    return known


def refuse_if_over_rate(state: Any, principal: str) -> None:  # noqa: ANN401 - the app's state
    """Raise 429 RATE_LIMITED before a single write's body is read if ``principal`` has no write token now.

    Nothing is taken here (``submit`` takes the token once the command is built): an over-rate principal's flood
    then costs the event loop a token check and an answer per request, not a body read, parse and validation. The
    batch route is not checked here: its cost is known only from its body (a batch over the burst is 413).
    """
    writes = state.quotas.writes
    wait = writes.wait_for(principal)
    if wait:
        state.metrics.rate_limited.labels(writes.name).inc()
        raise refusal(writes, principal, wait)


async def _principal(request: Request) -> str:
    """Return the principal of the request's bearer token (declared in OpenAPI by ``create_app``)."""
    return (await authenticate(request)).principal


async def _caller(request: Request) -> Caller:
    """Return the request's ``Caller``; routes check the scope of each command they build (``auth.scope_for``)."""
    return await authenticate(request)


async def _reader(request: Request) -> str:
    """Return the principal if its token has ``arbiter:read``, after taking one token of its read bucket: 429
    RATE_LIMITED when it has none."""
    caller = await authenticate(request)
    caller.require(READ)
    principal = caller.principal
    reads = request.app.state.quotas.reads
    wait = reads.take(principal)
    if wait:
        request.app.state.metrics.rate_limited.labels(reads.name).inc()
        raise refusal(reads, principal, wait)
    return principal


async def _operator(request: Request) -> str:
    """Return the principal if its token has ``arbiter:operate``: 401 without a valid token, else 403."""
    caller = await authenticate(request)
    caller.require(OPERATE)
    return caller.principal


async def _scraper(request: Request) -> str:
    """Return the principal if its token has ``arbiter:metrics`` (the scraper's) or ``arbiter:operate``."""
    caller = await authenticate(request)
    if METRICS not in caller.scopes:
        caller.require(OPERATE)
    return caller.principal


ContextDep = Annotated[ApiContext, Depends(_context)]
ReadModelDep = Annotated[ReadModelPort, Depends(_read_model)]
PrincipalDep = Annotated[str, Depends(_principal)]
#: The principal of a read (``GET /objects/{id}``, ``GET /commands/{id}``), charged to its read bucket.
ReaderDep = Annotated[str, Depends(_reader)]
OperatorDep = Annotated[str, Depends(_operator)]
#: The principal of a ``/metrics`` scrape: ``arbiter:metrics`` (a scraper's token) or ``arbiter:operate``.
ScraperDep = Annotated[str, Depends(_scraper)]
#: The caller of a write route, whose scopes are checked against each command it builds.
CallerDep = Annotated[Caller, Depends(_caller)]
