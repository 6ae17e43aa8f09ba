"""What JSON text Arbiter stores: RFC 8259 objects only, so every document it serves back is valid JSON.

Python's ``json`` accepts more than RFC 8259: ``NaN``, ``Infinity`` and numbers that overflow a double (``1e400``
becomes ``inf``), and escaped lone surrogates (``"\\ud800"``), none of which can be written back as JSON or UTF-8.
Nesting is bounded too (``Limits.max_json_depth``), so no reader of a document needs deep recursion. The API
refuses such bodies with 422 and ``commands.decide`` rejects them as ``MALFORMED`` when another producer puts
them on the topic: one function, used by both.
"""

from __future__ import annotations

import json
import math
from typing import Any

DEFAULT_MAX_DEPTH = 32


class _NotRfc8259(ValueError):
    pass


def _no_constant(name: str) -> Any:  # noqa: ANN401 - json's parse_constant hook
    raise _NotRfc8259(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotRfc8259(f"number {text[:40]} is out of range for a double")
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def depth_of(value: Any) -> int:  # noqa: ANN401 - any parsed JSON value
    """Return the nesting depth of a parsed JSON value: 0 for a scalar, 1 for a flat object or array."""
    depth = 0
    level = [value]
    while level:
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                nxt.extend(v.values())
            elif isinstance(v, list):
                nxt.extend(v)
        if not nxt and not any(isinstance(v, dict | list) for v in level):
            break
        depth += 1
        level = nxt
    return depth


def value_problem(value: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:  # noqa: ANN401
    """Return why a parsed JSON value cannot be stored as RFC 8259 JSON text, or None if it can."""
    if depth_of(value) > max_depth:
        return f"JSON nesting deeper than {max_depth} levels"
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        return "JSON string holds a lone surrogate (not valid Unicode)"
    except ValueError as e:
        return f"JSON holds a non-finite number ({e})"
    return None


def object_problem(text: str, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:
    """Return why ``text`` is not the RFC 8259 JSON text of an object within ``max_depth``, or None if it is."""
    if not text.lstrip().startswith("{"):  # a cheap first-character test spares the parse for most garbage
        return "not the JSON text of an object"
    # Bracket counting bounds the depth before parsing: json.loads recurses once per level.
    if text.count("{") + text.count("[") > max_depth and _bracket_depth(text) > max_depth:
        return f"JSON nesting deeper than {max_depth} levels"
    try:
        value = _DECODER.decode(text)
    except _NotRfc8259 as e:
        return str(e)
    except (ValueError, RecursionError):
        return "not valid JSON text"
    if not isinstance(value, dict):
        return "not the JSON text of an object"
    if "\\u" in text:  # an escaped lone surrogate parses but can never be stored or sent as UTF-8
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return "JSON string holds a lone surrogate (not valid Unicode)"
    return None


def _bracket_depth(text: str) -> int:
    """Return the deepest bracket nesting of ``text``, ignoring brackets inside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]":
            depth -= 1
    return deepest
