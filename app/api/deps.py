"""Dependencies of the routes as ``Annotated`` aliases: settings, producer, outcomes, read model, principal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.auth import Unauthorized, verify_token
from app.api.metrics import ApiMetrics
from app.api.outcomes import OutcomeCache
from app.api.problems import ApiError
from app.api.producer import CommandProducer
from app.settings import Settings


class ObjectViewLike(Protocol):
    """What the API reads of an object: ``projections.db.ObjectView`` satisfies it."""

    @property
    def document(self) -> dict[str, Any]: ...
    @property
    def version(self) -> int: ...
    @property
    def deleted(self) -> bool: ...


class ReadModelPort(Protocol):
    """The DB projection's read side (``projections.db.ReadModel``): None for an id never created."""

    def get(self, object_id: str) -> ObjectViewLike | None: ...


def _state(name: str) -> Callable[[Request], Awaitable[Any]]:
    """Return a dependency reading ``app.state.<name>`` (set by ``create_app`` and its lifespan)."""

    async def dependency(request: Request) -> Any:  # async: a sync dependency would cost a threadpool hop
        return getattr(request.app.state, name)

    return dependency


async def _read_model(request: Request) -> ReadModelPort:
    rm: ReadModelPort | None = request.app.state.read_model
    if rm is None:
        raise ApiError("the read model is not open (is the DB projection running?)", code="READ_MODEL_UNAVAILABLE",
                       headers={"Retry-After": str(request.app.state.settings.retry_after_s)})
    return rm


_bearer = HTTPBearer(auto_error=False, description="`arbiter token <principal>` prints one.")


async def _principal(request: Request,
               credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("an Authorization: Bearer <token> header is required")
    return verify_token(request.app.state.settings.auth_secret.get_secret_value(), credentials.credentials)


SettingsDep = Annotated[Settings, Depends(_state("settings"))]
ProducerDep = Annotated[CommandProducer, Depends(_state("producer"))]
OutcomesDep = Annotated[OutcomeCache, Depends(_state("outcomes"))]
MetricsDep = Annotated[ApiMetrics, Depends(_state("metrics"))]
ReadModelDep = Annotated[ReadModelPort, Depends(_read_model)]
PrincipalDep = Annotated[str, Depends(_principal)]
