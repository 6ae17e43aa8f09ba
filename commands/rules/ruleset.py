"""A compiled rules document: what ``decide`` consults, built once per deployed version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from commands.rules.document import canonical_rules, rules_digest


@dataclass(frozen=True, slots=True)
class RuleSet:
    """One deployed version of the rules: its number, the digest and canonical text of its document, compiled."""

    version: int
    digest: str
    document: str
    types: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def compile_rules(document: str, *, version: int) -> RuleSet:
    """Compile a rules document (YAML or JSON text, canonical or not) as version ``version``; raise RulesInvalid."""
    canonical = canonical_rules(document)
    return RuleSet(version, rules_digest(canonical), canonical)
