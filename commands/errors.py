"""The one exception root and the reason codes shared by rejections, HTTP answers and metrics."""

from __future__ import annotations

from enum import StrEnum


class ReasonCode(StrEnum):
    """Why a command was rejected; the same codes appear on the rejections topic, in HTTP and metrics."""

    ALREADY_EXISTS = "ALREADY_EXISTS"
    NOT_FOUND = "NOT_FOUND"
    DELETED = "DELETED"
    VERSION_CONFLICT = "VERSION_CONFLICT"
    FORBIDDEN = "FORBIDDEN"
    DUPLICATE = "DUPLICATE"
    TOO_LARGE = "TOO_LARGE"
    MALFORMED = "MALFORMED"
    UNSUPPORTED_SCHEMA = "UNSUPPORTED_SCHEMA"
    MISROUTED = "MISROUTED"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    UNAUTHENTICATED = "UNAUTHENTICATED"  # a command record without a valid signature (app/signing.py)
    RULE_VIOLATED = "RULE_VIOLATED"  # a rule of the team's rules document refused it (commands.rules)
    RULE_ERROR = "RULE_ERROR"  # a rule failed at run time (missing field, type error): the command is refused
    RULES_VERSION_UNKNOWN = "RULES_VERSION_UNKNOWN"  # the validator was asked to decide under rules it lacks
    UNIQUE_VIOLATION = "UNIQUE_VIOLATION"  # a value its type declares unique is held by another object (commands.unique)
    OBJECT_HELD = "OBJECT_HELD"  # the object waits for a decision that spans objects; retry (commands.unique)


class ArbiterError(Exception):
    """Root of every error Arbiter raises; ``code`` is machine-readable."""

    code: str = "ARBITER_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
