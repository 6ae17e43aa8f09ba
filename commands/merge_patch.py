"""RFC 7386 JSON merge patch over parsed JSON values; pure, inputs are never mutated."""

from __future__ import annotations

from typing import Any

JSON = Any


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """Return ``target`` with ``patch`` applied per RFC 7386 (null deletes a member, objects merge)."""
    if not isinstance(patch, dict):
        return patch
    result: dict[str, JSON] = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result
