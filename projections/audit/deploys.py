"""Rules deploys and rescales in the audit trail: the catalog topic's claims and placements and the generations
topic's records, told apart from decisions.

The audit projection reads the rules catalog (``<commands>-rules``) beside the events and rejections: each deploy's
signed claim (who deployed which version and digest, when) and its placement (the offset of its control record on
each partition of ``commands``), both JSON (``schemas.rules_control``), both under the key ``arbiter:rules``. They
are chained like every record; this module keeps them from being counted as undecodable and names them in
``arbiter audit show arbiter:rules``. Each ``arbiter rescale`` step's generation record (``schemas.generations``:
which commands topic and partition count are current, paused or not, who ran it, when) is chained the same way,
under ``arbiter:generation``.
"""

from __future__ import annotations

from commands import Event, Rejection
from schemas import codec
from schemas.generations import generation_record
from schemas.rules_control import CONTROL_KEY, ControlInvalid, Deploy, Placed, decode_control, decode_placed

#: The object id the catalog's records are indexed under (their Kafka key): ``arbiter audit show arbiter:rules``.
RULES_OBJECT = CONTROL_KEY.decode()


def catalog_record(value: bytes | None) -> Deploy | Placed | None:
    """Return the deploy claim or placement ``value`` holds, or None if it is neither."""
    if not value or value[:1] != b"{":  # a decision is Avro in the wire format: it starts with the magic byte 0
        return None
    for decode in (decode_control, decode_placed):
        try:
            return decode(value)
        except ControlInvalid:
            continue
    return None


def decode_audited(value: bytes) -> Event | Rejection | None:
    """Decode a record the audit projection reads: a decision, or None for a rules catalog or generation record (no
    decision, not broken); raise ``schemas.codec.DecodeError`` for anything else that does not decode."""
    if catalog_record(value) is not None or generation_record(value) is not None:
        return None
    return codec.decode_outcome(value)
