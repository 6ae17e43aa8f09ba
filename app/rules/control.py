"""The rules control record (its wire format lives in ``schemas.rules_control``) and the headers it is written with.

A control record is recognised by its ``arbiter-control: rules`` header, before anything tries to decode it as a
command. It is signed in its own domain (``app.signing.CONTROL_DOMAIN``), the deploy's claim on the catalog in
another (``CLAIM_DOMAIN``) and the placement in a third (``PLACED_DOMAIN``): the validator rejects an unsigned or
forged control record, or a copy of a claim, ``UNAUTHENTICATED``.
"""

from __future__ import annotations

from app.settings import Settings
from app.signing import CLAIM_DOMAIN, CONTROL_DOMAIN, PLACED_DOMAIN, signer_for
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
           "claim_headers", "control_headers", "decode_control", "decode_placed", "encode_control", "encode_placed",
           "is_control", "placed_headers"]


def control_headers(settings: Settings, value: bytes) -> list[tuple[str, bytes]]:
    """Return the headers of a control record on the commands topic: the control marker, signed as a control record."""
    return [(CONTROL_HEADER, RULES_CONTROL), *signer_for(settings, CONTROL_DOMAIN).headers(CONTROL_KEY, value)]


def claim_headers(settings: Settings, value: bytes) -> list[tuple[str, bytes]]:
    """Return the headers of a deploy's claim on the catalog: the same marker and value as its control records,
    signed as a claim (so a copy of it on the commands topic, a race's loser too, switches no shard)."""
    return [(CONTROL_HEADER, RULES_CONTROL), *signer_for(settings, CLAIM_DOMAIN).headers(CONTROL_KEY, value)]


def placed_headers(settings: Settings, value: bytes) -> list[tuple[str, bytes]]:
    """Return the headers of a placement record on the catalog: its own marker (never read as a claim), signed."""
    return [(CONTROL_HEADER, RULES_PLACED), *signer_for(settings, PLACED_DOMAIN).headers(CONTROL_KEY, value)]
