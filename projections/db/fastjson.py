"""The read model's JSON: orjson where its result is the standard library's, ``json`` where it would differ.

The domain accepts whatever ``json.loads`` accepts, so the projection must too, and the stored bytes stay the
canonical ``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` ones (equal views, equal
bytes, whichever release wrote them). orjson differs from those only on:

- integers beyond 64 bits, which it parses to floats: text with a run of 19+ digits goes to ``json``;
- ``NaN``/``Infinity``, out-of-range floats, lone surrogates, which it refuses: it raises, ``json`` takes over;
- NaN/Infinity written as ``null``, and floats from 1e-9 to 1e-4 written ``1e-7`` or ``0.00001`` for ``1e-07``
  and ``1e-05`` (measured over 2M random doubles: nothing else differs): output with ``null``, ``0.0000`` or a
  one-digit negative exponent is rewritten by ``json`` (a deterministic choice, so bytes stay canonical).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# The guards are byte searches (memchr speed), not regexes: on these ~130-byte documents a regex scan costs as
# much as orjson saves.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_NINETEEN_DIGITS = b"0" * 19
_SHORT_NEGATIVE_EXPONENT = re.compile(rb"e-[0-9](?![0-9])")
_SORT = orjson.OPT_SORT_KEYS


def loads(text: str | bytes) -> Any:
    """Return what ``json.loads(text)`` returns; raise ``ValueError`` where it does."""
    raw = text if type(text) is bytes else text.encode("utf-8", "surrogatepass")  # type: ignore[union-attr]
    if _NINETEEN_DIGITS not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def dumps(value: Any) -> bytes:
    """Return ``value`` as canonical JSON bytes: sorted keys, no spaces, UTF-8, byte-identical to ``json``."""
    try:
        out = orjson.dumps(value, option=_SORT)
    except orjson.JSONEncodeError:
        return _json_dumps(value)
    if b"null" in out or b"0.0000" in out or (b"e-" in out and _SHORT_NEGATIVE_EXPONENT.search(out) is not None):
        return _json_dumps(value)
    return out


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
