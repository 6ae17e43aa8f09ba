"""The team's own rules: object types, schemas, tracked fields, transitions and guards, as data (issue 36).

A rules document (YAML or JSON, checked against ``schemas/rules.schema.json``, generated from
``commands.rules.meta_schema``) names types; a create may name one (``CreateObject.object_type``, immutable), and
every later command on that object is decided under its type's rules too. Exact semantics, by module:

- ``commands.rules.document``: parsing, the published JSON Schema, the canonical text and its digest;
- ``commands.rules.ruleset``: compiling (what is refused at deploy, with JSON pointers into the document);
- ``commands.rules.expression``: what a CEL guard may be, checked on cel-cpp's checked AST
  (``commands.rules.checked_ast``), and what it sees;
- ``commands.rules.cost``: what a guard may cost (the budget checked before any guard runs, the worst case a deploy
  refuses);
- ``commands.rules.tracked``: tracked fields under merge-patch semantics;
- ``commands.rules.evaluate``: the order in which rules run and what each outcome is (RULE_VIOLATED, RULE_ERROR,
  TOO_LARGE), the variables of a guard, and the modes (a rule in ``warn`` or ``audit`` mode never refuses: its
  failure is a warning in the event, ``Event.warnings``);
- ``commands.rules.python_guards``: guards answered in Python from cel-cpp's checked AST where the answer is
  certainly cel-cpp's, cel-cpp deciding the rest (the cost per decision: ``bench.domain_rules``).

Every event and rejection decided with a rule set names its version (``rules_version``); a rule's rejection names
the rule (``<type>:<rule name>``, or ``types`` for an unknown type), its message and the JSON pointers it concerns.
Objects without a type are decided as before rules existed. Rules are data: no I/O (no remote ``$ref``), no clock
but the command's ``issued_at``, no randomness, so ``decide`` stays a pure function of (state, command, rules).

Pure: imports only ``commands`` modules, PyYAML, jsonschema-rs and cel-expr-python. Not compiled by mypyc (see
``app.native.loader.COMPILED``, which compiles ``commands/``' own modules, not this package's).
"""

from commands.rules.document import RulesInvalid, canonical_rules, rules_digest
from commands.rules.evaluate import Verdict, apply_rules
from commands.rules.ruleset import RuleSet, compile_rules

__all__ = ["RuleSet", "RulesInvalid", "Verdict", "apply_rules", "canonical_rules", "compile_rules", "rules_digest"]
