"""The JSON merge patch (RFC 7386) that turns one document into another, for read-modify-write updates."""

from __future__ import annotations

from typing import Any


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Return the merge patch taking ``old`` to ``new``: changed members, removed ones as null, objects recursed.

    A merge patch cannot set a member to null (null means "remove"), so a ``new`` holding a null member is refused
    (``ValueError``) rather than silently written as a removal.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        if value is None:
            raise ValueError(f"member {key!r} is null: a JSON merge patch cannot store null (it removes the member)")
        before = old.get(key, _MISSING)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = diff(before, value)
            if inner:
                patch[key] = inner
        elif before is _MISSING or before != value or type(before) is not type(value):
            _refuse_nulls(value, key)
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def apply(target: Any, patch: Any) -> Any:  # noqa: ANN401 - any JSON
    """Return ``target`` with ``patch`` applied (RFC 7386 §2), as the server applies it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply(out.get(key), value)
    return out


def _refuse_nulls(value: Any, where: str) -> None:  # noqa: ANN401 - any JSON
    if isinstance(value, dict):
        for k, v in value.items():
            if v is None:
                raise ValueError(f"member {where}/{k} is null: a JSON merge patch cannot store null")
            _refuse_nulls(v, f"{where}/{k}")


_MISSING = object()
