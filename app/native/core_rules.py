"""The team's rules as the compiled core reads them: a JSON export of a compiled ``RuleSet``, loaded once per version.

The core (``core/src/rules.rs``) decides typed objects from what ``commands.rules.ruleset`` already compiled: per
type its two schemas (as the document gives them; the core compiles them with the ``jsonschema`` crate exactly as
``_compile_schema`` does with jsonschema-rs), tracked fields, bound, transitions, the schemas' mode and the command
kinds that have guards (those keys go back to the Python fold: cel-cpp and the guard budget decide them). Nothing
here decides: it copies the compiled rules, so the one specification stays ``commands.rules``.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

from commands.rules import RuleSet


def export(ruleset: RuleSet) -> str:
    """Return the JSON the core's ``Rules`` reads for ``ruleset``."""
    document = json.loads(ruleset.document)["types"]
    types: dict[str, Any] = {}
    for name, t in ruleset.types.items():
        spec = document[name]
        types[name] = {
            "create_schema": spec.get("create_schema") if t.create_schema is not None else None,
            "patch_schema": spec.get("patch_schema") if t.patch_schema is not None else None,
            "tracked": [[field, pointer, list(tokens)] for field, pointer, tokens in t.tracked],
            "max_tracked_bytes": t.max_tracked_bytes,
            "schema_mode": t.schema_mode,
            "transitions": [{"rule": x.rule, "field": x.field, "pointer": x.pointer,
                             "initial": sorted(x.initial) if x.initial is not None else None,
                             "allowed": {k: sorted(v) for k, v in x.allowed.items()}, "message": x.message,
                             "mode": x.mode} for x in t.transitions],
            "guard_kinds": sorted({kind for g in t.guards for kind in g.kinds}),
        }
    return json.dumps({"version": ruleset.version, "types": types}, ensure_ascii=False)


_LOADED: dict[tuple[int, int, str], Any] = {}


def core_rules(core: ModuleType, ruleset: RuleSet | None) -> Any:  # noqa: ANN401 - the core's Rules, or None
    """Return ``core.Rules`` of ``ruleset`` (None for None), built once per core module and version."""
    if ruleset is None:
        return None
    key = (id(core), ruleset.version, ruleset.digest)
    loaded = _LOADED.get(key)
    if loaded is None:
        if len(_LOADED) >= 16:
            _LOADED.clear()
        loaded = _LOADED[key] = core.Rules(export(ruleset))
    return loaded
