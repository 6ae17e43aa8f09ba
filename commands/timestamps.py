"""The one check that keeps naive datetimes out of the domain: every timestamp is tz-aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from commands.errors import ArbiterError, ReasonCode


def require_utc(value: datetime, name: str) -> datetime:
    """Return ``value`` converted to UTC; raise ``ArbiterError(MALFORMED)`` if it is naive."""
    if not isinstance(value, datetime):
        raise ArbiterError(f"{name} must be a datetime, got {type(value).__name__}", code=ReasonCode.MALFORMED)
    offset = value.utcoffset()
    if offset is None:
        raise ArbiterError(f"{name} must be timezone-aware (UTC), got naive {value.isoformat()}",
                           code=ReasonCode.MALFORMED)
    if value.tzinfo is UTC:
        return value
    return value.astimezone(UTC)
