"""Arbiter's Python client: ``Client`` (blocking) and ``AsyncClient`` (asyncio) on httpx, typed outcomes and errors.

Imports only httpx and the standard library; the server's packages are never needed.
"""

from arbiter_client.aio import AsyncClient
from arbiter_client.errors import (
    CODES,
    AlreadyExists,
    ArbiterError,
    BadRequest,
    BrokerUnavailable,
    ChangesExpired,
    Deleted,
    Duplicate,
    Forbidden,
    IdempotencyKeyReused,
    InsufficientScope,
    NotFound,
    RateLimited,
    Rejected,
    RuleViolated,
    TooLarge,
    TransportFailed,
    Unauthorized,
    Unavailable,
    VersionConflict,
)
from arbiter_client.models import Accepted, Change, Document, HistoryEvent, ListedObject, Queued
from arbiter_client.retry import RetryPolicy
from arbiter_client.sync import Client

__all__ = [
    "CODES", "Accepted", "AlreadyExists", "ArbiterError", "AsyncClient", "BadRequest", "BrokerUnavailable",
    "Change", "ChangesExpired", "Client", "Deleted", "Document", "Duplicate", "Forbidden", "HistoryEvent",
    "IdempotencyKeyReused", "InsufficientScope", "ListedObject", "NotFound", "Queued", "RateLimited", "Rejected",
    "RetryPolicy", "RuleViolated", "TooLarge", "TransportFailed", "Unauthorized", "Unavailable", "VersionConflict",
]
