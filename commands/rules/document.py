"""The rules document as text: parse (YAML or JSON), check against its published JSON Schema, canonicalise, digest."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from commands.errors import ArbiterError


class RulesInvalid(ArbiterError):
    """A rules document that cannot be deployed; ``problems`` name each fault with a JSON pointer into it."""

    code = "RULES_INVALID"

    def __init__(self, problems: tuple[str, ...] | list[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("rules document is invalid: " + "; ".join(self.problems))


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_rules(document: str | bytes) -> str:
    """Return the canonical JSON text of a rules document given as YAML or JSON text; raise RulesInvalid."""
    if isinstance(document, bytes):
        try:
            document = document.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RulesInvalid([f"(document): not UTF-8 text: {e}"]) from e
    try:
        value = json.loads(document)
    except ValueError as e:
        raise RulesInvalid([f"(document): not JSON: {e}"]) from e
    if not isinstance(value, dict):
        raise RulesInvalid(["(document): must be an object"])
    return _canonical_json(value)


def rules_digest(canonical: str) -> str:
    """Return ``"sha256:<hex>"`` of the canonical JSON text of a rules document (its UTF-8 bytes)."""
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
