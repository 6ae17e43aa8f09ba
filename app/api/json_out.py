"""The one rule for JSON leaving the API, whichever way a document leaves it (``GET /objects/{id}``, history pages,
the change feed): stored JSON text is parsed as ``json`` parses it (``projections.db.fastjson``: integers of any
size stay exact integers, never floats) and written as RFC 8259 JSON only (``NaN``, ``Infinity`` and lone
surrogates raise ``ValueError``: the caller answers ``UNSERVABLE_DOCUMENT``)."""

from __future__ import annotations

import json
from typing import Any

from projections.db import fastjson

#: Compact, UTF-8 as is, NaN and Infinity refused (``ValueError``).
encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def parse(text: str | bytes) -> Any:  # noqa: ANN401 - any JSON value
    """Return the value of stored JSON ``text`` exactly as ``json.loads`` does (big integers stay integers)."""
    return fastjson.loads(text)


def dumps(value: Any) -> bytes:  # noqa: ANN401 - any JSON value
    """Return ``value`` as RFC 8259 JSON bytes; raise ``ValueError`` for what JSON cannot say (NaN, a lone
    surrogate)."""
    return encode(value).encode("utf-8")
