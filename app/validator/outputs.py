"""Map an outcome to the Kafka record the sink writes: topic, key, codec bytes and an explicit partition."""

from __future__ import annotations

from app.settings import Settings
from commands import Event, Rejection
from schemas import codec


def outcome_record(outcome: Event | Rejection, settings: Settings, partition: int) -> tuple[str, bytes | None, bytes, int]:
    """Return ``(topic, key, value, partition)`` for ``outcome`` decided from a command read at ``partition``.

    The partition is the source command's, so a replayed batch lands every record where the first attempt did.
    """
    if isinstance(outcome, Event):
        return settings.topic_events, outcome.object_id.encode("utf-8"), codec.encode_event(outcome), partition
    if outcome.object_id is not None:
        key: bytes | None = outcome.object_id.encode("utf-8")
    else:
        key = outcome.original.key if outcome.original is not None else None
    return settings.topic_rejections, key, codec.encode_rejection(outcome), partition
