"""Named parameters: values a rules document declares under ``parameters`` and its guards read as ``params.<name>``.

Kubernetes' ``paramKind`` keeps a policy apart from its parameters; here the parameters are a section of the rules
document, so they are part of its canonical text, its digest and its version: a parameter change is a deploy of a
new version (``app.rules.deploy.deploy_parameters``: the newest document with its ``parameters`` replaced), in force
from its control record's offset on every partition, and every replay decides the same (decisions stay a pure
function of the topic). Semantics:

- ``params.<name>`` (outside string literals and ``//`` comments) is replaced, before cel-cpp compiles a guard or a
  message expression, by the CEL literal of the parameter's JSON value, in parentheses: a guard decides exactly as
  the document with the values written inline would (a property test holds them to it). The literal is part of
  the checked AST, so the cost budget prices it as any constant; the text bounds are checked on the text as written.
- A guard reading a parameter the document does not declare is refused when the document compiles (``rules check``,
  ``rules deploy``, ``PUT /rules``), never a run-time error; ``params`` read otherwise (whole, indexed) is refused
  by cel-cpp as an undeclared variable.
- ``parameter_schema`` (optional, Draft 2020-12) types the ``parameters`` object: a document (a parameter deploy
  too) whose parameters it refuses is not deployable.
"""

from __future__ import annotations

import json
import re
from typing import Any

from commands.rules.document import RulesInvalid, canonical_json, json_value, parse_rules
from commands.rules.expression import code_spans

#: The variable a guard reads parameters through.
PARAMS = "params"
_READ = re.compile(r"(?<![A-Za-z0-9_.])params\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")


def cel_literal(value: Any) -> str:  # noqa: ANN401 - any JSON value
    """Return the CEL literal of a plain JSON value (null, bool, int, float, string, list, map with string keys)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".eE") else text + ".0"
    if isinstance(value, str):  # JSON's escapes (\" \\ \b \f \n \r \t \uXXXX below U+0020) are CEL's too
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(cel_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{cel_literal(k)}: {cel_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a JSON value: {value!r}")


def substitute(expr: str, params: dict[str, Any]) -> tuple[str, set[str], list[str]]:
    """Return ``expr`` with each ``params.<name>`` in its code replaced by ``(<literal>)``, the names it reads, and a
    problem for each name ``params`` does not declare."""
    names: set[str] = set()
    problems: list[str] = []

    def literal(m: re.Match[str]) -> str:
        name = m.group(1)
        names.add(name)
        if name not in params:
            problems.append(f"params.{name}: no such parameter (declared: {', '.join(sorted(params)) or 'none'})")
            return m.group(0)
        return f"({cel_literal(params[name])})"

    out = "".join(_READ.sub(literal, expr[a:b]) if code else expr[a:b] for a, b, code in code_spans(expr))
    return out, names, list(dict.fromkeys(problems))


def parameters_of(value: dict[str, Any]) -> dict[str, Any]:
    """Return the ``parameters`` of a parsed rules document ({} if none)."""
    params = value.get("parameters", {})
    return params if isinstance(params, dict) else {}


def schema_problems(value: dict[str, Any]) -> list[str]:
    """Return where a document's ``parameter_schema`` refuses its ``parameters`` (or is no usable schema); [] if it
    has none or accepts them."""
    if "parameter_schema" not in value:
        return []
    from commands.rules.ruleset import _compile_schema

    problems: list[str] = []
    validator = _compile_schema(value["parameter_schema"], "/parameter_schema", problems)
    if validator is None:
        return problems
    errors = sorted(validator.iter_errors(parameters_of(value)), key=lambda e: [str(t) for t in e.instance_path])
    return [f"/parameters{''.join('/' + str(t) for t in e.instance_path)}: {e.message[:300]} (parameter_schema)"
            for e in errors]


def parameters_file(text: str | bytes) -> dict[str, Any]:
    """Return the ``parameters`` of a parameters file: a YAML or JSON document holding only a ``parameters`` map (a
    rules document's section, deployable alone); raise RulesInvalid."""
    value = json_value(text, "(parameters)")
    if not isinstance(value, dict) or set(value) != {"parameters"} or not isinstance(value["parameters"], dict):
        raise RulesInvalid(["(parameters): a parameters file is one map, `parameters: {name: value, ...}`, and "
                            "nothing else"])
    return dict(value["parameters"])


def with_parameters(document: str, params: dict[str, Any]) -> str:
    """Return the canonical text of rules document ``document`` with its ``parameters`` replaced by ``params``
    (compile it to check it: ``commands.rules.compile_rules``)."""
    value = parse_rules(document)
    value["parameters"] = params
    return canonical_json(value)
