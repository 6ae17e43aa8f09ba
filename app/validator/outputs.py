"""Map an outcome to the Kafka record the sink writes: topic, key, codec bytes, an explicit partition and headers.

An outcome whose record would not fit a Kafka record (``app.limits``) is replaced by a ``TOO_LARGE``
rejection that does: one record must never fail the micro-batch, which Spark would replay forever.
"""

from __future__ import annotations

from app.limits import FALLBACK_KEEP_BYTES, MESSAGE_CHARS, SizeLimits, clip_utf8
from app.settings import Settings
from app.validator.headers import Headers, ce_headers
from app.validator.murmur2 import partition_for
from commands import Event, ReasonCode, Rejection, keep_original
from commands.ids import record_rejection_id
from commands.rejection import clip
from schemas import codec

OutputRecord = tuple[str, bytes | None, bytes, int, Headers]


def outcome_record(outcome: Event | Rejection, settings: Settings, partition: int, trace: Headers = ()) -> OutputRecord:
    """Return ``(topic, key, value, partition, headers)`` for ``outcome`` decided from a command read at ``partition``.

    The partition is the source command's, so a replayed batch lands every record where the first attempt did;
    the headers (``app.validator.headers``) are derived from ``outcome`` alone, then the command's ``trace``
    context (``app.traces.trace_headers`` of its headers), so they are the same bytes too.
    """
    headers = ce_headers(outcome, source_topic(settings))
    if trace:
        headers += trace
    if isinstance(outcome, Event):
        key = outcome.object_id.encode("utf-8")
        return settings.topic_events, key, codec.encode_event(outcome), output_partition(settings, key, partition), \
            headers
    if outcome.object_id is not None:
        key: bytes | None = outcome.object_id.encode("utf-8")
    else:
        key = outcome.original.key if outcome.original is not None else None
    return settings.topic_rejections, key, codec.encode_rejection(outcome), output_partition(settings, key, partition), \
        headers


def source_topic(settings: Settings) -> str:
    """Return the commands topic outputs name in ``ce_source``: the configured one in every generation (app.rescale),
    the contract's constant, so a batch decided or re-emitted in a rescaled generation writes the same headers."""
    return settings.topic_commands_source or settings.topic_commands


def output_partition(settings: Settings, key: bytes | None, partition: int) -> int:
    """Return the output partition of a record decided from ``partition``: the same one, unless rescaled.

    After ``arbiter rescale`` (``app.rescale``) the commands topic may have another partition count than the
    output topics, which keep theirs (``settings.output_partitions``) so their consumers see no change: a keyed
    record then goes where the Java client would put its key there, so one object's outputs stay on one
    partition across generations; an unkeyed one to the source partition modulo the count.
    """
    out = settings.output_partitions
    if out is None or out == settings.partitions:
        return partition
    return partition % out if key is None else partition_for(key, out)


def record_size(record: OutputRecord) -> int:
    """Return the key + value bytes of an output record: what ``SizeLimits.max_record_bytes`` bounds.

    Its headers are bounded apart (``app.limits.HEADERS_BYTES``).
    """
    key = record[1]
    return len(record[2]) + (len(key) if key is not None else 0)


def too_large(outcome: Event | Rejection, size: int, sizes: SizeLimits, settings: Settings, key: bytes | None,
              value: bytes | None, topic: str, partition: int, offset: int, trace: Headers = ()) -> OutputRecord:
    """Return the ``TOO_LARGE`` rejection record replacing ``outcome`` (``size`` bytes of key and value, too many).

    ``key``/``value``/``topic``/``partition``/``offset`` are the source record's: the rejection keeps its
    coordinates and ``FALLBACK_KEEP_BYTES`` of its key and value (with their lengths and SHA-256), and the
    outcome's ids clipped to ``max_id_bytes``, and its rules version. Built only from its inputs, so a replay writes
    the same bytes; it carries the command's ``trace`` context like any output.
    """
    what = f"event {outcome.type.value}" if isinstance(outcome, Event) else f"rejection {outcome.reason.value}"
    version = outcome.version - 1 if isinstance(outcome, Event) else outcome.current_version
    ids = sizes.max_id_bytes
    message = clip(f"{topic}[{partition}]@{offset}: its {what} is {size} bytes of key and value, over the "
                   f"{sizes.max_record_bytes} that fit a Kafka record (max.message.bytes={sizes.max_message_bytes}); "
                   "the command is rejected and changes nothing", MESSAGE_CHARS)
    rejection = Rejection(
        rejection_id=record_rejection_id(topic, partition, offset, ReasonCode.TOO_LARGE.value),
        reason=ReasonCode.TOO_LARGE,
        message=message,
        command_id=None if outcome.command_id is None else clip_utf8(outcome.command_id, ids),
        object_id=None if outcome.object_id is None else clip_utf8(outcome.object_id, ids),
        principal=None if outcome.principal is None else clip_utf8(outcome.principal, ids),
        occurred_at=outcome.occurred_at,
        current_version=version,
        original=keep_original(topic, partition, offset, key, value, keep=FALLBACK_KEEP_BYTES),
        rules_version=outcome.rules_version,  # decided under the same rules as the outcome it replaces
    )
    return outcome_record(rejection, settings, partition, trace)
