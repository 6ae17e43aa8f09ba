"""Park a command record that did not decode: its full bytes go to the parked topic, its rejection points there.

The rejection keeps its bounded copy (``app.validator.decode``); the parked record (``schemas.parked``) keeps the
key, the value and the signature whole, on the parked topic's partition of the same number, keyed by the source
record's coordinates (``topic[partition]@offset``: the source key is in the envelope, and a record key of its own
would count its bytes twice against the topic's limit). Both are built from the source record alone, so a replayed
micro-batch writes the same bytes.
"""

from __future__ import annotations

from dataclasses import replace

from app.limits import FRAME_BYTES, MESSAGE_CHARS, PARKED_MARGIN_BYTES
from app.settings import Settings
from app.validator.outputs import OutputRecord, output_partition
from commands import ReasonCode, Rejection
from commands.rejection import clip
from schemas import parked

#: The reasons whose records are parked: their bytes never became a command, so a fix may make them one.
PARKED_REASONS = frozenset({ReasonCode.MALFORMED, ReasonCode.UNSUPPORTED_SCHEMA})


def park(rejection: Rejection, key: bytes | None, value: bytes | None, topic: str, partition: int, offset: int,
         signature: bytes | None, settings: Settings, signature_state: str = parked.UNCHECKED,
         reasons: frozenset[ReasonCode] = PARKED_REASONS) -> tuple[Rejection, OutputRecord | None]:
    """Return (the rejection with a pointer in its message, the parked record), or ``rejection`` and None.

    ``signature_state`` is what ``app.validator.decode.decode_record`` found of the record's signature; the
    envelope keeps it, so a redrive knows whether the bytes came from Arbiter (``app.parked.lot``).

    A record is parked when its reason is in ``reasons`` (``PARKED_REASONS``; a record written to a closed generation
    is parked whatever it holds, ``app.rescale.late``) and its envelope fits the parked topic
    (``app.limits.PARKED_MARGIN_BYTES``: any uncompressed record of the commands topic does); a record that does
    not fit is said so in the message and not parked.
    """
    if rejection.reason not in reasons:
        return rejection, None
    into = settings.parked_topic
    where = f"{topic}[{partition}]@{offset}".encode()
    size = len(where) + parked.overhead(topic, rejection.reason.value, rejection.rejection_id) \
        + sum(len(b) for b in (key, signature, value) if b)
    if size > settings.max_message_bytes + PARKED_MARGIN_BYTES - FRAME_BYTES:
        return _pointing(rejection, f" [not parked: {size} bytes do not fit {into}]"), None
    envelope = parked.encode(parked.Parked(topic, partition, offset, rejection.reason.value, rejection.rejection_id,
                                           key, signature, value, signature_state))
    at = output_partition(settings, None, partition)  # the source's partition, unless rescaled (app.rescale)
    return _pointing(rejection, f" [full bytes parked in {into}[{at}]]"), (into, where, envelope, at, ())


def _pointing(rejection: Rejection, suffix: str) -> Rejection:
    return replace(rejection, message=clip(rejection.message, MESSAGE_CHARS - len(suffix) - 1) + suffix)
