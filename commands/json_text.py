"""What a document may hold: the one rule, applied by the API (422), the validator (MALFORMED) and the read model.

RFC 8259 objects only, so every document Arbiter serves back is valid JSON, and nothing a read-model backend
cannot store. Python's ``json`` accepts more than RFC 8259: ``NaN``, ``Infinity`` and numbers that overflow a
double (``1e400`` becomes ``inf``), and escaped lone surrogates (``"\\ud800"``), none of which can be written back
as JSON or UTF-8. U+0000 (``"\\u0000"``, in a string or a key) is valid JSON but PostgreSQL's ``jsonb`` and ``text``
cannot hold it, so it is refused too, as it is in ids (``id_problem``). Nesting is bounded
(``Limits.max_json_depth``), so no reader of a document needs deep recursion.

What every backend holds alike and is therefore accepted: any finite double and any integer Python parses (jsonb's
``numeric`` holds them exactly; it may spell them differently, ``1e16`` as ``10000000000000000``, ``-0.0`` as
``0.0``), any key order (JSON objects are unordered) and duplicate keys (every parser here keeps the last one, and
the read model stores the parsed object, so duplicates never reach a backend).

The API refuses such bodies with 422, ``commands.decide`` rejects them as ``MALFORMED`` when another producer puts
them on the topic, and ``projections.db.apply`` quarantines the document of an event that breaks the rule (one
written before it, or by another producer): one set of functions, used by all three.
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


NUL_PROBLEM = "JSON string or key holds U+0000, which PostgreSQL cannot store"


def holds_nul(value: Any) -> bool:  # noqa: ANN401 - any parsed JSON value
    """Return True if a string or an object key anywhere in ``value`` holds U+0000."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if "\x00" in v:
                return True
        elif isinstance(v, dict):
            for k, item in v.items():
                if "\x00" in k:
                    return True
                todo.append(item)
        elif isinstance(v, list):
            todo.extend(v)
    return False


def id_problem(name: str, value: str) -> str | None:
    """Return why ``value`` cannot be an id or a principal downstream (it holds U+0000), or None."""
    return f"{name} holds U+0000, which PostgreSQL cannot store" if "\x00" in value else None


def value_problem(value: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> str | None:  # noqa: ANN401
    """Return why a parsed JSON value cannot be stored as RFC 8259 JSON text in every backend, or None if it can."""
    if depth_of(value) > max_depth:
        return f"JSON nesting deeper than {max_depth} levels"
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "JSON string holds a lone surrogate (not valid Unicode)"
    except ValueError as e:
        return f"JSON holds a non-finite number ({e})"
    if "\\u0000" in text and holds_nul(value):  # json.dumps writes U+0000 as that escape, and only it
        return NUL_PROBLEM
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
    if "\\u" in text:  # only an escape can put a lone surrogate or U+0000 into valid JSON text
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return "JSON string holds a lone surrogate (not valid Unicode)"
        if "\\u0000" in text and holds_nul(value):
            return NUL_PROBLEM
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
