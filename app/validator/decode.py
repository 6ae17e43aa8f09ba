"""Turn one Kafka record of the commands topic into a Command, or into a rejection that keeps its bytes (bounded)."""

from __future__ import annotations

from app.limits import MESSAGE_CHARS, clip_utf8
from app.signing import RecordSigner, verdict
from app.validator.murmur2 import partition_for
from commands import (
    DEFAULT_LIMITS,
    KEEP_BYTES,
    Command,
    OriginalRecord,
    ReasonCode,
    Rejection,
    keep_original,
    reject_record,
)
from commands.rejection import clip
from schemas import codec

QUOTED_BYTES = 200  # of a key quoted in a message


def to_command(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int,
               *, partitions: int | None = None, keep: int = KEEP_BYTES,
               id_bytes: int = DEFAULT_LIMITS.max_id_bytes, signature: bytes | None = None,
               checker: RecordSigner | None = None) -> Command | Rejection:
    """``decode_record`` without the signature's state."""
    return decode_record(key, value, topic, partition, offset, partitions=partitions, keep=keep, id_bytes=id_bytes,
                         signature=signature, checker=checker)[0]


def decode_record(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int,
                  *, partitions: int | None = None, keep: int = KEEP_BYTES,
                  id_bytes: int = DEFAULT_LIMITS.max_id_bytes, signature: bytes | None = None,
                  checker: RecordSigner | None = None) -> tuple[Command | Rejection, str]:
    """Return (the command or rejection of one record, the state of its signature: ``schemas.parked``'s
    ``SIGNATURE_STATES``).

    The signature is checked first, before anything is decided about the record: a record that goes on to be
    rejected for its bytes (and parked) says whether it came from Arbiter's producers, so the parking lot never
    re-signs a forgery as genuine (``app.parked.lot``). Then: decode ``value``; reject undecodable bytes,
    unknown schemas, a key that is not the object id, or a misrouted record.

    With ``partitions`` given, a record whose partition is not murmur2(key) mod ``partitions`` is
    ``MISROUTED``: accepting it would split the object's state across two shards. A rejection keeps at most
    ``keep`` bytes each of the key and value (with their full lengths and SHA-256), an object id clipped to
    ``id_bytes`` and a message of at most ``app.limits.MESSAGE_CHARS`` characters, so it fits on its topic
    whatever a producer put on the commands topic (``app.limits.size_limits`` sizes ``keep``).
    With a ``checker``, a command whose ``signature`` (its ``arbiter-signature`` header) is missing or does not
    match its key and value is ``UNAUTHENTICATED`` (``app.signing``): its principal cannot be trusted.
    """
    # The common case (bytes in, a command for this key and partition out) builds nothing else: the
    # OriginalRecord is only needed by a rejection.
    if key is not None and type(key) is not bytes:
        key = bytes(key)
    if value is not None and type(value) is not bytes:
        value = bytes(value)
    state, problem = verdict(checker, key, value, signature)
    if value is None:
        return _reject(key, value, topic, partition, offset, keep, ReasonCode.MALFORMED, "record has no value"), state
    try:
        command = codec.decode_command(value)
    except codec.DecodeError as e:
        return _reject(key, value, topic, partition, offset, keep, e.reason, str(e)), state
    object_key = command.object_id.encode("utf-8")
    if key != object_key:
        return _reject(key, value, topic, partition, offset, keep, ReasonCode.MALFORMED,
                       f"Kafka key {_quote(key)} is not the command's object id {clip(command.object_id)!r}",
                       clip_utf8(command.object_id, id_bytes)), state
    if partitions is not None and partition_for(object_key, partitions) != partition:
        return _reject(key, value, topic, partition, offset, keep, ReasonCode.MISROUTED,
                       f"object {clip(command.object_id)!r} belongs to partition "
                       f"{partition_for(object_key, partitions)} of {partitions}, not {partition}",
                       clip_utf8(command.object_id, id_bytes)), state
    if problem is not None:
        return _reject(key, value, topic, partition, offset, keep, ReasonCode.UNAUTHENTICATED, problem,
                       clip_utf8(command.object_id, id_bytes)), state
    return command, state


def _quote(key: bytes | None) -> str:
    if key is None:
        return "None"
    return repr(key) if len(key) <= QUOTED_BYTES else repr(key[:QUOTED_BYTES]) + f"… ({len(key)} bytes)"


def _reject(key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int, keep: int,
            reason: ReasonCode, why: str, object_id: str | None = None) -> Rejection:
    original = keep_original(topic, partition, offset, key, value, keep)
    return reject_record(original, reason, clip(f"{_at(original)}: {why}", MESSAGE_CHARS), object_id=object_id)


def _at(original: OriginalRecord) -> str:
    return f"{original.topic}[{original.partition}]@{original.offset}"
