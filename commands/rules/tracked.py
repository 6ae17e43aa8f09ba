"""Tracked fields: the few document members the rules need, kept in the object's compact state by JSON pointer.

- On create each tracked pointer's value is copied from the document (a missing member is null).
- On update the new value is what the pointer would give in the document after the RFC 7386 merge patch, computed
  from the old tracked value and the patch alone (the validator never holds the document): a patch that does not
  mention the pointer's path keeps the value; one that sets a prefix of the path to a non-object replaces it (the
  rest of the path is looked up in that value, missing is null); null at a prefix deletes it (null); an object at
  the full path is merged into the old value (``commands.merge_patch``).
- Pointers name object members only (an array is tracked whole: ``/watchers``, then ``size(next.watchers)``).
- A pointer tracked after the object was created (a later rules version) is null until a patch sets it.
- The state keeps the canonical JSON text of an object from pointer to value, null values left out (None when
  every value is null), so its bytes are a function of the values alone; its UTF-8 size is bounded per type.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
from typing import Any

from commands.merge_patch import merge_patch

JSON = Any


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """Return the reference tokens of an RFC 6901 JSON pointer (``~1`` is ``/``, ``~0`` is ``~``)."""
    if not pointer:
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} does not start with '/'")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


def value_at(value: JSON, tokens: tuple[str, ...]) -> JSON:
    """Return the value at ``tokens`` in a parsed JSON value, or None if any step is missing or not an object.

    Tokens name object members only, never array elements: a merge patch replaces arrays whole, and with members
    alone a non-null tracked value proves every prefix was an object, which makes ``patched_value`` exact.
    """
    for token in tokens:
        if not isinstance(value, dict):
            return None
        value = value.get(token)
    return value


def patched_value(old: JSON, tokens: tuple[str, ...], patch: JSON) -> JSON:
    """Return the value at ``tokens`` after merge patch ``patch``, given ``old``, the value there before."""
    for depth, token in enumerate(tokens):
        if not isinstance(patch, dict):  # this level is replaced whole (null deletes it)
            return value_at(patch, tokens[depth:])
        if token not in patch:
            return old
        patch = patch[token]
    return merge_patch(old, patch)


# json.dumps with these arguments builds this encoder, and its encode() a C encoder, on every call (~3 µs of a
# decision); the C encoder is built once here (json.encoder's own call, less the check for cycles, which parsed
# JSON cannot have), the Python encoder being the fallback where there is no C one.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # not in typeshed: CPython's _json
_C_ENCODER: Any = None if _MAKE_ENCODER is None else _MAKE_ENCODER(
    None, _CANONICAL.default, json.encoder.encode_basestring, None, ":", ",", True, False, False)
# json.loads is this scanner behind two whitespace regexes; canonical text has no whitespace around its value.
_SCAN: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed: a class, not a factory


def encode_tracked(values: dict[str, JSON]) -> str | None:
    """Return the canonical JSON text of ``values`` (pointer to value) without its nulls; None if all are null."""
    kept = {p: v for p, v in values.items() if v is not None}
    if not kept:
        return None
    if _C_ENCODER is None:
        return _CANONICAL.encode(kept)
    return "".join(_C_ENCODER(kept, 0))


def loads(text: str) -> JSON:
    """Return ``json.loads(text)``, without its whitespace regexes when ``text`` starts with ``{`` and ends with
    ``}`` (canonical text, and most patches), where the scanner alone gives the same value or the same error."""
    if text[:1] == "{" and text[-1:] == "}":
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


def decode_tracked(text: str | None) -> dict[str, JSON]:
    """Return the pointer-to-value object of a state's ``tracked`` text ({} for None)."""
    if text is None:
        return {}
    value = loads(text)
    if not isinstance(value, dict):
        raise ValueError("tracked fields are not a JSON object")
    return value
