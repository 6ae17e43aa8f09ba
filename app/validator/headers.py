"""CloudEvents headers of the validator's outputs (Kafka protocol binding, binary mode), derived only from the outcome.

Every event and rejection carries ``ce_specversion``, ``ce_id`` (the event or rejection id), ``ce_type``
(``arbiter.object.<event type>`` or ``arbiter.command.rejected``), ``ce_source`` (the commands topic the
decision came from), ``ce_subject`` (the object id, when known), ``ce_time`` (the command's ``issued_at``,
RFC 3339 in UTC, when known: a record that never decoded into a command has none) and ``content-type``.
Nothing here reads a clock or the environment: a replayed micro-batch writes the same headers byte for byte.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

from commands import Event, EventType, Rejection

Header = tuple[str, bytes]
Headers = tuple[Header, ...]

SPEC_VERSION = b"1.0"
CONTENT_TYPE = b"application/avro"  # the value is Avro in the Confluent wire format (magic byte, schema id, body)
REJECTED_TYPE = "arbiter.command.rejected"
EVENT_TYPES = {t: f"arbiter.object.{t.value.lower()}" for t in EventType}
_EVENT_TYPES = {t: v.encode() for t, v in EVENT_TYPES.items()}
_REJECTED = REJECTED_TYPE.encode()
SOURCE_PREFIX = "/arbiter/topics/"


@lru_cache(maxsize=8)
def source(commands_topic: str) -> bytes:
    """Return ``ce_source`` of the outcomes of ``commands_topic``: ``/arbiter/topics/<topic>``."""
    return (SOURCE_PREFIX + commands_topic).encode()


def ce_time(at: datetime) -> bytes:
    """Return ``at`` as RFC 3339 in UTC with microseconds and a ``Z``: ``2025-01-02T03:04:05.000006Z``."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()


def ce_headers(outcome: Event | Rejection, commands_topic: str) -> Headers:
    """Return the CloudEvents headers of ``outcome``, decided from a command of ``commands_topic``."""
    if isinstance(outcome, Event):
        return (("ce_specversion", SPEC_VERSION), ("ce_id", outcome.event_id.encode()),
                ("ce_type", _EVENT_TYPES[outcome.type]), ("ce_source", source(commands_topic)),
                ("ce_subject", outcome.object_id.encode("utf-8")), ("ce_time", ce_time(outcome.occurred_at)),
                ("content-type", CONTENT_TYPE))
    headers = [("ce_specversion", SPEC_VERSION), ("ce_id", outcome.rejection_id.encode()),
               ("ce_type", _REJECTED), ("ce_source", source(commands_topic))]
    if outcome.object_id is not None:
        headers.append(("ce_subject", outcome.object_id.encode("utf-8")))
    if outcome.occurred_at is not None:
        headers.append(("ce_time", ce_time(outcome.occurred_at)))
    headers.append(("content-type", CONTENT_TYPE))
    return tuple(headers)
