"""The team's own rules: object types, schemas, tracked fields, transitions and guards, as data (issue 36).

This package is pure (no I/O, no clock, no randomness) and may import only ``commands`` and its CEL and JSON
Schema libraries. The exact semantics are documented here and in the modules below; the README's Rules section is
written from them.
"""

from commands.rules.document import RulesInvalid, canonical_rules, rules_digest
from commands.rules.ruleset import RuleSet, compile_rules

__all__ = ["RuleSet", "RulesInvalid", "canonical_rules", "compile_rules", "rules_digest"]
