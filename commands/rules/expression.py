"""CEL guards: compile-time checks of an expression's text and its compilation with cel-expr-python (cel-cpp).

What a guard may be, enforced at compile time (``RulesInvalid`` otherwise), so that its worst-case cost is linear
in its inputs, which Arbiter bounds (ids, groups, editors, readers, tracked bytes, document size):

- at most ``MAX_EXPRESSION_CHARS`` characters and ``MAX_EXPRESSION_DEPTH`` nested brackets;
- the comprehension macros ``all``, ``exists`` and ``exists_one`` are allowed but never nested (no comprehension in
  another's arguments), so each is one pass over one bounded list or map; ``map`` and ``filter`` are refused (they
  build lists whose order over a map is not defined, and a guard is a yes/no question);
- it must type-check in cel-cpp with ``state``, ``next``, ``command`` and ``caller`` declared as maps of string to
  dyn (so an unknown variable or function, or a syntax error, is refused) and its static type must be bool or dyn;
- the four variables are read only as ``<variable>.<member>`` (not indexed or whole, so what a guard reads is known);
- every ``next.<name>`` and ``state.<name>`` names a tracked field (or, for ``state``, one of its own members);
  ``caller.<name>`` and ``command.<name>`` name members those maps have (``STATE_MEMBERS`` and below).

cel-cpp offers no cost estimate through its Python binding, hence these static bounds. Regular expressions
(``matches``) are RE2: linear time. There is no clock (no ``now``): ``command.issued_at`` is the only time.
"""

from __future__ import annotations

import re
from typing import Any

from commands.rules.bounds import MAX_EXPRESSION_CHARS, MAX_EXPRESSION_DEPTH

#: Members of ``state`` besides the tracked fields (a tracked field may not take one of these names).
STATE_MEMBERS = ("exists", "deleted", "version", "owner", "editors", "readers", "type", "created_at", "updated_at")
#: Members of ``caller``.
CALLER_MEMBERS = ("principal", "groups", "issuer")
#: Members of ``command``.
COMMAND_MEMBERS = ("kind", "id", "object_id", "expected_version", "issued_at", "document", "patch", "editor",
                   "reader", "type")
VARIABLES = ("state", "next", "command", "caller")
_COMPREHENSIONS = ("all", "exists", "exists_one")
_REFUSED_MACROS = ("map", "filter")

_STRING = re.compile(r"""(?:[rR]?[bB]?|[bB]?[rR]?)('''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""",
                     re.DOTALL)
_MEMBER = re.compile(r"(?<![\w.])(state|next|command|caller)\s*\.\s*([A-Za-z_]\w*)")
_BARE = re.compile(r"(?<![\w.])(state|next|command|caller)\b(?!\s*\.\s*[A-Za-z_])")
_MACRO = re.compile(r"\.\s*([A-Za-z_]\w*)\s*\(")


def _without_strings(text: str) -> str:
    return _STRING.sub(lambda m: "''", text)


def text_problems(expr: str, tracked: tuple[str, ...]) -> list[str]:
    """Return what is wrong with the text of a guard (bounds, macros, unknown members); [] if nothing."""
    if len(expr) > MAX_EXPRESSION_CHARS:
        return [f"expression is longer than {MAX_EXPRESSION_CHARS} characters"]
    code = _without_strings(expr)
    problems = []
    macro_at = {m.end() - 1: m.group(1) for m in _MACRO.finditer(code)}  # position of "(" -> macro name
    open_brackets: list[bool] = []  # per open bracket: is it a comprehension's argument list?
    deepest = 0
    for i, ch in enumerate(code):
        if ch in "([{":
            name = macro_at.get(i)
            if name in _REFUSED_MACROS:
                problems.append(f"the {name}() macro is not allowed in a guard (use all, exists or exists_one)")
            comprehension = name in _COMPREHENSIONS
            if comprehension and any(open_brackets):
                problems.append(f"{name}() inside another comprehension: nested comprehensions are not allowed")
            open_brackets.append(comprehension)
            deepest = max(deepest, len(open_brackets))
        elif ch in ")]}" and open_brackets:
            open_brackets.pop()
    if deepest > MAX_EXPRESSION_DEPTH:
        problems.append(f"brackets nested deeper than {MAX_EXPRESSION_DEPTH}")
    problems += [f"{m.group(1)}: read its members as {m.group(1)}.<name> (not indexed, not whole)"
                 for m in _BARE.finditer(code)]
    for m in _MEMBER.finditer(code):
        var, member = m.group(1), m.group(2)
        known: tuple[str, ...]
        if var == "next":
            known = tracked
        elif var == "state":
            known = (*STATE_MEMBERS, *tracked)
        elif var == "caller":
            known = CALLER_MEMBERS
        else:
            known = COMMAND_MEMBERS
        if member not in known:
            problems.append(f"{var}.{member}: unknown field (known: {', '.join(known) or 'none'})")
    return problems


def references(expr: str) -> set[tuple[str, str]]:
    """Return every (variable, member) the guard's text reads (outside string literals)."""
    return {(m.group(1), m.group(2)) for m in _MEMBER.finditer(_without_strings(expr))}


def uses(expr: str, var: str, member: str) -> bool:
    """Return True if the guard's text mentions ``var.member`` (outside string literals)."""
    return any(m.group(1) == var and m.group(2) == member for m in _MEMBER.finditer(_without_strings(expr)))


def new_environment() -> Any:  # noqa: ANN401 - a cel_expr_python Env
    """Return a cel-cpp environment declaring the four variables of a guard as maps of string to dyn."""
    from cel_expr_python import cel

    dyn_map = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
    return cel.NewEnv(variables={name: dyn_map for name in VARIABLES})


def compile_expression(env: Any, expr: str, *, int_result: bool = False) -> tuple[Any, str | None]:  # noqa: ANN401
    """Return the compiled expression and None, or None and why cel-cpp refused it (or its type is not bool)."""
    from cel_expr_python import cel

    try:
        compiled = env.compile(expr)
    except RuntimeError as e:
        return None, str(e).strip()
    kind = compiled.return_type()
    if int_result:
        return (compiled, None) if kind == cel.Type.INT else (None, f"the chain's type is {kind.name()}, not int")
    if kind != cel.Type.BOOL and kind != cel.Type.DYN:
        return None, f"the expression's type is {kind.name()}, not bool"
    return compiled, None
