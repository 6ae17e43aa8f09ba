"""The rules control record (its wire format lives in ``schemas.rules_control``) and the headers it is written with.

A control record is recognised by its ``arbiter-control: rules`` header, before anything tries to decode it as a
command, and signed exactly like a command record (``app.signing``), so the validator rejects an unsigned or forged
one ``UNAUTHENTICATED``.
"""

from __future__ import annotations

from app.signing import RecordSigner
from schemas.rules_control import (
    CONTROL_HEADER,
    CONTROL_KEY,
    RULES_CONTROL,
    RULES_PLACED,
    ControlInvalid,
    Deploy,
    Placed,
    decode_control,
    decode_placed,
    encode_control,
    encode_placed,
    is_control,
)

__all__ = ["CONTROL_HEADER", "CONTROL_KEY", "RULES_CONTROL", "RULES_PLACED", "ControlInvalid", "Deploy", "Placed",
           "control_headers", "decode_control", "decode_placed", "encode_control", "encode_placed", "is_control",
           "placed_headers"]


def control_headers(signer: RecordSigner, value: bytes) -> list[tuple[str, bytes]]:
    """Return the headers of a control record: the control marker and the record signature."""
    return [(CONTROL_HEADER, RULES_CONTROL), *signer.headers(CONTROL_KEY, value)]


def placed_headers(signer: RecordSigner, value: bytes) -> list[tuple[str, bytes]]:
    """Return the headers of a placement record on the catalog: its own marker (never read as a claim), signed."""
    return [(CONTROL_HEADER, RULES_PLACED), *signer.headers(CONTROL_KEY, value)]
