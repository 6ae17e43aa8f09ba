"""Guards in Python: cel-cpp's own checked AST of a guard, translated for the common subset; cel-cpp decides the rest.

Why: a guard evaluated through cel-expr-python costs a crossing into C++ and a conversion of every variable into
CEL values, ~7 µs for the realistic rule set's five guards, several times the ~10 µs of a whole decision without
rules (``bench.domain_rules``; ``docs/benchmarks.md``). The usual guard compares a few tracked fields with
literals, which plain Python does in well under a microsecond.

How it stays exact. The translation reads the AST cel-cpp compiled (``Expression.serialize()``, a
``cel.expr.CheckedExpr``: the parse is CEL's, macros and precedence included) and turns each run of guards into one
Python function. Every operation answers only where its operands' types make CEL's answer certain and otherwise
raises ``Defer``; a guard using anything else (arithmetic, ``matches``, timestamps, ``exists_one``, map literals,
unsigned or bytes literals, ...) is not translated at all. A run whose function raises, or whose variables hold a
value CEL could not take as it is (an integer beyond 64 bits, a string that is not Unicode), is evaluated by cel-cpp
exactly as before, so the outcome (and its bytes) is cel-cpp's in every case; ``tests/unit/test_rules_python_guards.py``
holds both to each other on generated values and expressions. Where CEL short-circuits (``||``, ``&&``, ``?:``)
Python evaluates left to right and defers on the first error, which is never a different answer: CEL's
result for ``true || <error>`` is true, and an error on the left is handed to cel-cpp. Comprehensions count their
iterations as cel-cpp does and defer at its budget (``CEL_MAX_ITERATIONS``), where cel-cpp's answer is an error.
What a guard may cost is checked before either runs (``commands.rules.cost``).

A translated run is ``run(O, N, L, C, K, P) -> int``: the index of its first false guard, or -1; ``O`` and ``N`` are
the tracked fields before and after (pointer to value), ``L`` the object's state (None unless it exists), ``C`` the
command, ``K`` its kind and ``P`` its parsed document or patch (see ``commands.rules.evaluate``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from commands.rules.bounds import CEL_MAX_ITERATIONS
from commands.rules.checked_ast import Unreadable, checked_expr
from commands.rules.checked_ast import fields as _fields
from commands.rules.checked_ast import one as _one

JSON = Any
#: A translated run of guards: the index of the first false guard, or -1 (raises ``Defer`` where CEL must decide).
Run = Callable[[dict[str, JSON], dict[str, JSON], Any, Any, str, JSON], int]
_INT64 = 1 << 63


class Defer(Exception):  # noqa: N818 - not an error: cel-cpp decides this one
    """Raised where the Python answer would not be certainly CEL's: the run is handed to cel-cpp."""


class _Untranslatable(Exception):  # noqa: N818
    pass


# --- the operations, each answering only where CEL's answer is certain -----------------------------------------------

_NONE = type(None)
_KIND = {_NONE: "null", bool: "bool", int: "number", float: "number", str: "string", list: "list", dict: "map"}
_SCALAR = frozenset((_NONE, bool, int, float, str))
_ORDERED = frozenset((bool, int, float, str))


def _defer() -> Any:  # noqa: ANN401
    raise Defer


def _bool(value: JSON) -> bool:
    if value is True or value is False:
        return value
    raise Defer


def _eq(a: JSON, b: JSON) -> bool:
    """CEL's heterogeneous ``==`` on scalars: equal kinds compare by value, different kinds are not equal."""
    ta, tb = type(a), type(b)
    if ta is tb and ta in _SCALAR:
        return bool(a == b)
    ka, kb = _KIND.get(ta), _KIND.get(tb)
    if ka is None or kb is None or ka == kb:  # two lists or maps, or an int beside a double: cel-cpp answers
        raise Defer
    return False  # values of different kinds are never equal in CEL


def _in(x: JSON, container: JSON) -> bool:
    if type(container) is list:
        if type(x) is str or x is None:  # equal only to an equal string (or null): Python's == says the same
            return x in container
        return any(_eq(x, e) for e in container)
    if type(container) is dict and type(x) is str:
        return x in container
    raise Defer


def _size(x: JSON) -> int:
    if type(x) in (str, list, dict):  # a string's size is its code points, as len
        return len(x)
    raise Defer


def _index(container: JSON, key: JSON) -> JSON:
    if type(container) is list and type(key) is int and 0 <= key < len(container):
        return container[key]
    if type(container) is dict and type(key) is str and key in container:
        return container[key]
    raise Defer


def _member(container: JSON, name: str) -> JSON:
    if type(container) is dict and name in container:
        return container[name]
    raise Defer


def _has(container: JSON, name: str) -> bool:
    if type(container) is dict:
        return name in container
    raise Defer


def _text(method: str) -> Callable[[JSON, JSON], bool]:
    def op(s: JSON, arg: JSON) -> bool:
        if type(s) is str and type(arg) is str:
            return s.startswith(arg) if method == "startsWith" else s.endswith(arg) if method == "endsWith" else arg in s
        raise Defer
    return op


def _fold(count: list[int], items: JSON, accu: JSON, condition: Callable[[JSON], bool],
          step: Callable[[JSON, JSON], JSON], result: Callable[[JSON], JSON]) -> JSON:
    """CEL's comprehension: over a list's elements or a map's keys, while ``condition(accu)``, ``accu = step(...)``.

    A map's keys come in Python's order, maybe not cel-cpp's: ``all`` and ``exists`` give one answer in every order
    when no element is an error, and an error here defers. ``count`` is the guard's iterations so far, over all its
    comprehensions, counted as cel-cpp does: one per element reached, before its condition is checked; the
    ``CEL_MAX_ITERATIONS``-th is cel-cpp's error, so it defers (cel-cpp then answers it).
    """
    if type(items) is dict:
        items = list(items)
    elif type(items) is not list:
        raise Defer
    for item in items:
        count[0] += 1
        if count[0] >= CEL_MAX_ITERATIONS:
            raise Defer
        go = condition(accu)
        if go is False:
            break
        if go is not True:
            raise Defer
        accu = step(item, accu)
    return result(accu)


def _grantee(command: Any, name: str) -> JSON:  # noqa: ANN401
    return getattr(command, name, None)


def cel_ready(value: JSON) -> bool:
    """Return True if cel-expr-python takes ``value`` as the same value (no integer beyond int64, valid Unicode)."""
    t = type(value)
    if t is str:
        return bool(value.isascii()) or _unicode(value)
    if t is int:
        return bool(-_INT64 <= value < _INT64)
    if t is bool or t is float or value is None:
        return True
    if t is list:
        for v in value:
            if not (type(v) is str and v.isascii() or cel_ready(v)):
                return False
        return True
    if t is dict:
        return all(type(k) is str and cel_ready(k) and cel_ready(v) for k, v in value.items())
    return False


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_HELPERS: dict[str, Any] = {"_defer": _defer, "_bool": _bool, "_eq": _eq, "_in": _in, "_size": _size,
                            "_index": _index, "_member": _member, "_has": _has, "_grantee": _grantee, "_fold": _fold,
                            "_SCALAR": _SCALAR, "_ORDERED": _ORDERED, "_starts": _text("startsWith"),
                            "_ends": _text("endsWith"), "_contains": _text("contains")}
_COMPARE = {"_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">="}
_TEXT = {"startsWith": "_starts", "endsWith": "_ends", "contains": "_contains"}
_TYPES = {"bool": bool, "int": int, "float": float, "str": str, "null": _NONE}
# The members of state, command and caller that are not tracked fields, as Python over (L, C, K, P), with the type
# each always has (None: any JSON value). Timestamps are left out: a guard reading one is not translated.
_STATE = {"exists": ("(L is not None)", "bool"), "deleted": ("(L is not None and L.deleted)", "bool"),
          "version": ("(L.version if L is not None else 0)", "int"),
          "owner": ("(L.owner if L is not None else '')", "str"),
          "editors": ("(list(L.editors) if L is not None else [])", None),
          "readers": ("(list(L.readers) if L is not None else [])", None),
          "type": ("(L.object_type if L is not None else None)", None)}
_COMMAND = {"kind": ("K", "str"), "id": ("C.command_id", "str"), "object_id": ("C.object_id", "str"),
            "expected_version": ("C.expected_version", None), "document": ("(P if K == 'create' else None)", None),
            "patch": ("(P if K == 'update' else None)", None), "editor": ("_grantee(C, 'editor')", None),
            "reader": ("_grantee(C, 'reader')", None)}
_CALLER = {"principal": ("C.principal", "str"), "groups": ("list(C.groups)", None), "issuer": ("C.issuer", None)}

Code = tuple[str, str | None]  # Python expression, and the type its value always has ("bool", "int", ...) or None


class _Translator:
    """Turns one guard's checked AST into a Python expression over (O, N, L, C, K, P).

    Each node gives its code and, where known, the one type its value can have: ``x == 'a'`` is Python's ``==``
    (a string equals only an equal string, in CEL as in Python), two bools combine with ``and``/``or``, and so on;
    where a type is not known, the generic form checks it when the guard runs.
    """

    def __init__(self, type_name: str, pointers: dict[str, str], constants: dict[str, Any]) -> None:
        self.type_name = type_name
        self.pointers = pointers  # tracked field name -> JSON pointer
        self.constants = constants  # shared by the run's function: name -> value
        self.temps = 0
        self.local = False  # True: a variable's member is the local the run read it into
        self.bound: dict[str, str] = {}  # a comprehension's variables in scope -> their Python names

    def temp(self) -> str:
        self.temps += 1
        return f"t{self.temps}"

    def constant(self, value: Any) -> str:  # noqa: ANN401
        name = f"k{len(self.constants)}"
        self.constants[name] = value
        return name

    def expr(self, buf: bytes) -> Code:
        f = _fields(buf)
        if 3 in f:
            return self.const(_fields(_one(f, 3)))
        if 5 in f:
            return self.select(_fields(_one(f, 5)))
        if 6 in f:
            return self.call(_fields(_one(f, 6)))
        if 4 in f:  # an identifier: only a comprehension's own variables (the four maps are read by select)
            name = _one(_fields(_one(f, 4)), 1, b"").decode("utf-8")
            if name not in self.bound:
                raise _Untranslatable(f"identifier {name}")
            return self.bound[name], None
        if 9 in f:
            return self.comprehension(_fields(_one(f, 9)))
        if 7 in f:
            elements = _fields(_one(f, 7))
            if 2 in elements:  # optional elements
                raise _Untranslatable("optional list elements")
            return "[" + ", ".join(self.expr(e)[0] for e in elements.get(1, [])) + "]", None
        raise _Untranslatable("a map or message literal")

    def comprehension(self, f: dict[int, list[Any]]) -> Code:
        """Return ``_fold`` over lambdas: what ``all`` and ``exists`` expand to (``exists_one`` counts with ``+``,
        which is not translated, and ``map``/``filter`` are refused in guards)."""
        if 8 in f or self.bound:  # two iteration variables; or a comprehension in another (refused in guards anyway)
            raise _Untranslatable("nested or two-variable comprehension")
        item, accu = (_one(f, n, b"").decode("utf-8") for n in (1, 3))
        iter_range, init = self.expr(_one(f, 2))[0], self.expr(_one(f, 4))[0]
        self.bound = {accu: "acc"}
        condition = self.expr(_one(f, 5))[0]
        result = self.expr(_one(f, 7))[0]
        self.bound = {accu: "acc", item: "item"}
        step = self.expr(_one(f, 6))[0]
        self.bound = {}
        return (f"_fold(it, {iter_range}, {init}, lambda acc: {condition}, lambda item, acc: {step}, "
                f"lambda acc: {result})"), None

    def const(self, f: dict[int, list[Any]]) -> Code:
        if 1 in f:
            return "None", "null"
        if 2 in f:
            return ("True" if _one(f, 2) else "False"), "bool"
        if 3 in f:
            value = _one(f, 3)
            return self.constant(value - (1 << 64) if value >= _INT64 else value), "int"
        if 5 in f:
            return self.constant(struct.unpack("<d", _one(f, 5))[0]), "float"
        if 6 in f:
            return self.constant(_one(f, 6).decode("utf-8")), "str"
        raise _Untranslatable("an unsigned, bytes, duration or timestamp literal")

    def select(self, f: dict[int, list[Any]]) -> Code:
        operand = _fields(_one(f, 1, b""))
        name = _one(f, 2, b"").decode("utf-8")
        if 4 in operand:  # a variable: state, next, command or caller
            if _one(f, 3, 0):
                raise _Untranslatable("has() of a variable's member")
            var = _one(_fields(_one(operand, 4)), 1, b"").decode("utf-8")
            code, kind = self.variable(var, name)  # raises on a member this module does not know (a timestamp)
            return (f"{var}_{name}" if self.local else code), kind
        inner, _ = self.expr(_one(f, 1))
        if _one(f, 3, 0):
            return f"_has({inner}, {self.constant(name)})", "bool"
        return f"_member({inner}, {self.constant(name)})", None

    def variable(self, var: str, member: str) -> Code:
        if var == "next" and member in self.pointers:
            return f"N.get({self.constant(self.pointers[member])})", None
        found: Code | None = None
        if var == "state":
            if member in self.pointers:
                return f"O.get({self.constant(self.pointers[member])})", None
            found = _STATE.get(member)
        elif var == "command":
            found = (self.constant(self.type_name), "str") if member == "type" else _COMMAND.get(member)
        elif var == "caller":
            found = _CALLER.get(member)
        if found is None:
            raise _Untranslatable(f"{var}.{member}")
        return found

    def call(self, f: dict[int, list[Any]]) -> Code:
        name = _one(f, 2, b"").decode("utf-8")
        target = _one(f, 1)
        args = [self.expr(a) for a in f.get(3, [])]
        if target is not None:
            receiver, _ = self.expr(target)
            if name in _TEXT and len(args) == 1:
                return f"{_TEXT[name]}({receiver}, {args[0][0]})", "bool"
            if name == "size" and not args:
                return f"_size({receiver})", "int"
            raise _Untranslatable(f"method {name}")
        if name in ("_||_", "_&&_") and len(args) >= 2:
            return self.logic(name == "_||_", args)
        if name == "@not_strictly_false" and len(args) == 1:  # a comprehension's loop condition
            return (args[0][0] if args[0][1] == "bool" else f"_bool({args[0][0]})"), "bool"
        if name == "!_" and len(args) == 1:
            (a, kind), t = args[0], self.temp()
            return (f"(not {a})" if kind == "bool" else f"(_defer() if type({t} := {a}) is not bool else not {t})"), "bool"
        if name == "_?_:_" and len(args) == 3:
            (c, kind), (x, kx), (y, ky), t = args[0], args[1], args[2], self.temp()
            code = f"({x} if {c} else {y})" if kind == "bool" else \
                f"({x} if ({t} := {c}) is True else {y} if {t} is False else _defer())"
            return code, kx if kx == ky else None
        if name in ("_==_", "_!=_") and len(args) == 2:
            return self.equal(args[0], args[1], name == "_!=_")
        if name in _COMPARE and len(args) == 2:
            return self.compare(_COMPARE[name], args[0], args[1])
        if name == "@in" and len(args) == 2:
            return f"_in({args[0][0]}, {args[1][0]})", "bool"
        if name == "size" and len(args) == 1:
            return f"_size({args[0][0]})", "int"
        if name == "_[_]" and len(args) == 2:
            return f"_index({args[0][0]}, {args[1][0]})", None
        raise _Untranslatable(f"function {name}")

    def logic(self, is_or: bool, args: list[Code]) -> Code:
        code, kind = args[0]
        for arg, arg_kind in args[1:]:
            right = arg if arg_kind == "bool" else f"_bool({arg})"
            if kind == "bool":  # Python's and/or on bools short-circuit as CEL does when no side is an error
                code = f"({code} {'or' if is_or else 'and'} {right})"
            else:
                t = self.temp()
                stop, go = ("True", "False") if is_or else ("False", "True")
                code = f"({stop} if ({t} := {code}) is {stop} else {right} if {t} is {go} else _defer())"
            kind = "bool"
        return code, "bool"

    def equal(self, left: Code, right: Code, negate: bool) -> Code:
        (a, ka), (b, kb) = left, right
        op, slow = ("!=", "not ") if negate else ("==", "")
        if "bool" in (ka, kb) or "null" in (ka, kb):  # true, false and null are singletons: identity is CEL's ==
            return f"({a} is {'not ' if negate else ''}{b})", "bool"
        if "str" in (ka, kb) or ka == kb and ka is not None:  # a string equals only an equal string
            return f"({a} {op} {b})", "bool"
        if ka is None and kb is not None:
            (a, ka), (b, kb) = right, left
        t = self.temp()
        if kb is not None:  # an int or a double: another int (or double) compares by value, the rest by _eq
            return f"({t} {op} {b} if type({t} := {a}) is {kb} else {slow}_eq({t}, {b}))", "bool"
        u = self.temp()
        return (f"({t} {op} {u} if type({t} := {a}) is type({u} := {b}) and type({t}) in _SCALAR "
                f"else {slow}_eq({t}, {u}))"), "bool"

    def compare(self, op: str, left: Code, right: Code) -> Code:
        (a, ka), (b, kb) = left, right
        if ka is not None and ka == kb and ka in ("int", "float", "str", "bool"):
            return f"({a} {op} {b})", "bool"
        ta, tb = self.temp(), self.temp()
        if ka in ("int", "float", "str") and kb is None:
            return f"({a} {op} {tb} if type({tb} := {b}) is {ka} else _defer())", "bool"
        if kb in ("int", "float", "str") and ka is None:
            return f"({ta} {op} {b} if type({ta} := {a}) is {kb} else _defer())", "bool"
        return (f"({ta} {op} {tb} if type({ta} := {a}) is type({tb} := {b}) and type({ta}) in _ORDERED "
                f"else _defer())"), "bool"


def translate(programs: list[Any], reads: dict[str, tuple[str, ...]], type_name: str,  # noqa: ANN401
              pointers: dict[str, str]) -> Run | None:
    """Return one Python function for a command kind's guards, in order (see the module), or None if one guard is
    not translatable.

    It first reads every member in ``reads`` (what cel-cpp is handed: the members all the type's guards read) and
    defers unless each is a value cel-expr-python takes as it is (``cel_ready``): where one is not, cel-cpp's
    conversion fails the whole run, whichever guard reads it. Timestamps are not read: a guard reading one is not
    translated, and they are built from datetimes (``commands.rules.evaluate``), which always convert.
    """
    constants: dict[str, Any] = {}
    translator = _Translator(type_name, pointers, constants)
    lines = ["def run(O, N, L, C, K, P):"]
    try:
        for var, members in reads.items():
            for member in members:
                if member in ("created_at", "updated_at", "issued_at"):
                    continue
                local = f"{var}_{member}"
                code, kind = translator.variable(var, member)
                lines.append(f"    {local} = {code}")
                if kind == "str":
                    lines += [f"    if not ({local}.isascii() or cel_ready({local})):", "        _defer()"]
                elif kind == "int":
                    lines += [f"    if not {-_INT64} <= {local} < {_INT64}:", "        _defer()"]
                elif kind is None:
                    lines += [f"    if not ({local} is None or {local}.__class__ is str and {local}.isascii() or "
                              f"{local}.__class__ is int and {-_INT64} <= {local} < {_INT64} or cel_ready({local})):",
                              "        _defer()"]
        translator.local = True
        for index, program in enumerate(programs):
            code, kind = translator.expr(checked_expr(program))
            if "_fold(" in code:  # the guard's iterations (cel-cpp's budget is per evaluation of one guard)
                lines.append("    it = [0]")
            if kind == "bool":
                lines += [f"    if not {code}:", f"        return {index}"]
            else:
                lines += [f"    r = {code}", "    if r is not True:", f"        return {index} if r is False else _defer()"]
    except (_Untranslatable, Unreadable, IndexError, UnicodeDecodeError, struct.error):
        return None
    lines.append("    return -1")
    namespace = {**_HELPERS, **constants, "cel_ready": cel_ready}
    exec(compile("\n".join(lines), f"<guards of {type_name}>", "exec"), namespace)  # noqa: S102 - our own translation
    run: Run = namespace["run"]
    return run
