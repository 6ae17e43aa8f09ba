"""CEL guards: compile-time checks of an expression's text and its compilation with cel-expr-python (cel-cpp).

What a guard may be, enforced at compile time (``RulesInvalid`` otherwise):

- at most ``MAX_EXPRESSION_CHARS`` characters and ``MAX_EXPRESSION_DEPTH`` nested brackets (counted outside string
  literals and ``//`` comments; checked before cel-cpp parses it);
- it must type-check in cel-cpp with ``state``, ``next``, ``command`` and ``caller`` declared as maps of string to
  dyn (so an unknown variable or function, or a syntax error, is refused) and its static type must be bool or dyn;
- then, on cel-cpp's checked AST (``commands.rules.checked_ast``: what will run, whatever the text's comments and
  strings say): the comprehension macros ``all``, ``exists`` and ``exists_one`` are allowed but never nested (no
  comprehension in another's condition or step); ``map`` and ``filter`` are refused (they build lists whose order
  over a map is not defined, and a guard is a yes/no question); the four variables are read only as
  ``<variable>.<member>`` (not indexed or whole, so what a guard reads is known); every ``next.<name>`` and
  ``state.<name>`` names a tracked field (or, for ``state``, one of its own members); ``caller.<name>`` and
  ``command.<name>`` name members those maps have (``STATE_MEMBERS`` and below).

What a guard costs is bounded apart, on the same AST: ``commands.rules.cost`` (the budget every evaluation path
checks before a guard runs, and the worst case a deploy refuses). Regular expressions (``matches``) are RE2. There
is no clock (no ``now``): ``command.issued_at`` is the only time.
"""

from __future__ import annotations

from typing import Any

from commands.rules.bounds import MAX_EXPRESSION_CHARS, MAX_EXPRESSION_DEPTH, MAX_INLINED_CHARS
from commands.rules.checked_ast import (
    CALL,
    COMPREHENSION,
    CONST,
    IDENT,
    LIST,
    SELECT,
    Node,
    Unreadable,
    checked_expr,
    read,
)

#: Members of ``state`` besides the tracked fields (a tracked field may not take one of these names).
STATE_MEMBERS = ("exists", "deleted", "version", "owner", "editors", "readers", "type", "created_at", "updated_at")
#: Members of ``caller``.
CALLER_MEMBERS = ("principal", "groups", "issuer")
#: Members of ``command``.
COMMAND_MEMBERS = ("kind", "id", "object_id", "expected_version", "issued_at", "document", "patch", "editor",
                   "reader", "type")
VARIABLES = ("state", "next", "command", "caller")
_COMPREHENSIONS = ("all", "exists", "exists_one")


def _raw_prefix(expr: str, quote_at: int) -> bool:
    """Return True if the quote at ``quote_at`` opens a raw string (``r'...'``, ``rb'...'``, ``BR'...'``, ...)."""
    start = quote_at
    while start > 0 and quote_at - start < 2 and expr[start - 1] in "rRbB":
        start -= 1
    prefix = expr[start:quote_at].lower()
    return "r" in prefix and not (start > 0 and (expr[start - 1].isalnum() or expr[start - 1] == "_"))


def code_spans(expr: str) -> list[tuple[int, int, bool]]:
    """Return ``expr`` cut into (start, end, is_code) spans: code, and string literals and ``//`` comments (CEL's
    lexis: quotes ' " and their triples, the r/b prefixes, backslash escapes outside raw strings)."""
    spans: list[tuple[int, int, bool]] = []
    start = i = 0
    n = len(expr)
    while i < n:
        ch = expr[i]
        if ch == "/" and expr.startswith("//", i):
            end = expr.find("\n", i)
            end = n if end < 0 else end + 1
        elif ch in "'\"":
            quote = ch * 3 if expr.startswith(ch * 3, i) else ch
            raw = _raw_prefix(expr, i)
            end = i + len(quote)
            while end < n and not expr.startswith(quote, end):
                end += 2 if expr[end] == "\\" and not raw else 1
            end = min(n, end + len(quote))
        else:
            i += 1
            continue
        spans += [(start, i, True), (i, end, False)]
        start = i = end
    spans.append((start, n, True))
    return [s for s in spans if s[0] < s[1]]


def _depth(expr: str) -> int:
    """Return the deepest nesting of brackets in ``expr`` outside string literals and ``//`` comments."""
    deepest = depth = 0
    for a, b, code in code_spans(expr):
        for ch in expr[a:b] if code else "":
            if ch in "([{":
                depth += 1
                deepest = max(deepest, depth)
            elif ch in ")]}" and depth:
                depth -= 1
    return deepest


def text_problems(expr: str) -> list[str]:
    """Return what is wrong with the text of a guard before cel-cpp parses it (its length, its nesting); [] if
    nothing. Everything else is checked on the checked AST (``tree_problems``)."""
    if len(expr) > MAX_EXPRESSION_CHARS:
        return [f"expression is longer than {MAX_EXPRESSION_CHARS} characters"]
    if _depth(expr) > MAX_EXPRESSION_DEPTH:
        return [f"brackets nested deeper than {MAX_EXPRESSION_DEPTH}"]
    return []


def _known(var: str, tracked: tuple[str, ...]) -> tuple[str, ...]:
    if var == "next":
        return tracked
    if var == "state":
        return (*STATE_MEMBERS, *tracked)
    return CALLER_MEMBERS if var == "caller" else COMMAND_MEMBERS


def _macro(node: Node) -> str:
    """Return which macro a comprehension node came from: ``all``, ``exists``, ``exists_one``, ``map`` or ``filter``
    (``map`` for anything else: a guard has no other way to write a comprehension)."""
    init, step = node.children[1], node.children[3]
    if init.kind == CONST and init.value is True:
        return "all"
    if init.kind == CONST and init.value is False:
        return "exists"
    if init.kind == CONST and init.value == 0 and type(init.value) is int:
        return "exists_one"
    if step.kind == CALL and step.name == "_?_:_":  # filter(x, p): p ? accu + [x] : accu; map(x, p, f) adds [f(x)]
        added = step.children[1].children[-1] if step.children[1].children else step.children[1]
        element = added.children[0] if added.kind == LIST and added.children else added
        return "filter" if element.kind == IDENT and element.name == node.name else "map"
    return "map"


def tree_problems(tree: Node, tracked: tuple[str, ...]) -> list[str]:
    """Return what is wrong with a guard's checked AST (macros, nesting, what it reads); [] if nothing."""
    problems: list[str] = []

    def visit(node: Node, bound: frozenset[str], in_loop: bool) -> None:
        if node.kind == COMPREHENSION:
            macro = _macro(node)
            if macro not in _COMPREHENSIONS or node.two_variables:
                problems.append(f"the {macro}() macro is not allowed in a guard (use all, exists or exists_one)")
            elif in_loop:
                problems.append(f"{macro}() inside another comprehension: nested comprehensions are not allowed")
            rng, init, *body = node.children
            visit(rng, bound, in_loop)
            visit(init, bound, in_loop)
            inner = bound | {node.name, node.accu}
            for part in body:
                visit(part, inner, True)
            return
        if node.kind == SELECT and node.children[0].kind == IDENT and node.children[0].name in VARIABLES \
                and node.children[0].name not in bound:
            var, member = node.children[0].name, node.name
            known = _known(var, tracked)
            if member not in known:
                problems.append(f"{var}.{member}: unknown field (known: {', '.join(known) or 'none'})")
            return
        if node.kind == IDENT and node.name in VARIABLES and node.name not in bound:
            problems.append(f"{node.name}: read its members as {node.name}.<name> (not indexed, not whole)")
            return
        for child in node.children:
            visit(child, bound, in_loop)

    visit(tree, frozenset(), False)
    return list(dict.fromkeys(problems))


def references(tree: Node) -> set[tuple[str, str]]:
    """Return every (variable, member) a guard's checked AST reads (a comprehension's own variables are not read)."""
    found: set[tuple[str, str]] = set()

    def visit(node: Node, bound: frozenset[str]) -> None:
        if node.kind == SELECT and node.children[0].kind == IDENT and node.children[0].name in VARIABLES \
                and node.children[0].name not in bound:
            found.add((node.children[0].name, node.name))
            return
        if node.kind == COMPREHENSION:
            rng, init, *body = node.children
            visit(rng, bound)
            visit(init, bound)
            for part in body:
                visit(part, bound | {node.name, node.accu})
            return
        for child in node.children:
            visit(child, bound)

    visit(tree, frozenset())
    return found


def new_environment() -> Any:  # noqa: ANN401 - a cel_expr_python Env
    """Return a cel-cpp environment declaring the four variables of a guard as maps of string to dyn."""
    from cel_expr_python import cel

    dyn_map = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
    return cel.NewEnv(variables={name: dyn_map for name in VARIABLES})


def compile_expression(env: Any, expr: str, *, int_result: bool = False,  # noqa: ANN401
                       string_result: bool = False) -> tuple[Any, str | None]:
    """Return the compiled expression and None, or None and why cel-cpp refused it (or its type is not bool, or
    not string with ``string_result``)."""
    from cel_expr_python import cel

    try:
        compiled = env.compile(expr)
    except RuntimeError as e:
        return None, str(e).strip()
    kind = compiled.return_type()
    if int_result:
        return (compiled, None) if kind == cel.Type.INT else (None, f"the chain's type is {kind.name()}, not int")
    if string_result:
        if kind != cel.Type.STRING and kind != cel.Type.DYN:
            return None, f"the expression's type is {kind.name()}, not string"
        return compiled, None
    if kind != cel.Type.BOOL and kind != cel.Type.DYN:
        return None, f"the expression's type is {kind.name()}, not bool"
    return compiled, None


def compile_guard(env: Any, expr: str, tracked: tuple[str, ...], *,  # noqa: ANN401
                  message: bool = False, written: str | None = None) -> tuple[Any, Node | None, list[str]]:
    """Return a guard's program, its checked AST and its problems (its text's, then cel-cpp's, then the AST's).

    With ``message``, the guard's ``message_expression``: the same bounds and variables, a string result. With
    ``written``, ``expr`` is that text with its parameters' values inline (``commands.rules.params``): the text
    bounds are checked on the text as written.
    """
    problems = text_problems(expr if written is None else written)
    if not problems and written is not None:
        if len(expr) > MAX_INLINED_CHARS:
            problems = [f"with its parameters' values inline the expression has {len(expr)} characters, over "
                        f"{MAX_INLINED_CHARS}"]
        elif _depth(expr) > MAX_EXPRESSION_DEPTH:
            problems = [f"with its parameters' values inline, brackets are nested deeper than {MAX_EXPRESSION_DEPTH}"]
    if problems:
        return None, None, problems
    program, why = compile_expression(env, expr, string_result=message)
    if why is not None:
        return None, None, [why]
    try:
        tree = read(checked_expr(program))
    except Unreadable as e:
        return None, None, [f"cel-cpp's checked expression could not be read: {e}"]
    return program, tree, tree_problems(tree, tracked)
