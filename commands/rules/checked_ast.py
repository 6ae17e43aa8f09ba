"""cel-cpp's checked AST of a guard, read from its ``cel.expr.CheckedExpr`` protobuf into a small typed tree.

Why: what a guard reads, which macros it uses and what it may cost are questions about the expression cel-cpp
parsed and will evaluate, not about its text (a string literal or a ``//`` comment can hide anything from a regex).
cel-expr-python hands out the checked expression only serialized (``Expression.serialize()``: a
``google.protobuf.Any``); the protobuf wire format of the few fields read here is decoded by hand, so this needs no
protobuf classes. ``commands.rules.python_guards`` reads the same bytes with the same wire reader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

#: ``Expr`` fields (cel/expr/syntax.proto): the kind of node each number holds.
CONST, IDENT, SELECT, CALL, LIST, STRUCT, COMPREHENSION = 3, 4, 5, 6, 7, 8, 9
_INT64 = 1 << 63


class Unreadable(Exception):  # noqa: N818 - not Arbiter's error: the wire was not what this module reads
    """The bytes are not a checked expression this module can read."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, i


def fields(buf: bytes) -> dict[int, list[Any]]:
    """Return a message's fields: number -> values (int for varints, bytes for fixed64 and length-delimited)."""
    out: dict[int, list[Any]] = {}
    i, n = 0, len(buf)
    try:
        while i < n:
            key, i = _varint(buf, i)
            number, wire = key >> 3, key & 7
            value: Any
            if wire == 0:
                value, i = _varint(buf, i)
            elif wire == 1:
                value, i = buf[i:i + 8], i + 8
            elif wire == 2:
                length, i = _varint(buf, i)
                value, i = buf[i:i + length], i + length
            elif wire == 5:
                value, i = buf[i:i + 4], i + 4
            else:
                raise Unreadable(f"wire type {wire}")
            out.setdefault(number, []).append(value)
    except IndexError as e:
        raise Unreadable("truncated message") from e
    return out


def one(message: dict[int, list[Any]], number: int, default: Any = None) -> Any:  # noqa: ANN401
    """Return the last value of field ``number`` (protobuf's rule for a repeated scalar field), or ``default``."""
    values = message.get(number)
    return values[-1] if values else default


def checked_expr(program: Any) -> bytes:  # noqa: ANN401 - a cel_expr_python Expression
    """Return the ``cel.expr.Expr`` (bytes) of a compiled program, out of its ``google.protobuf.Any`` wrapper."""
    wrapper = fields(program.serialize())
    if not one(wrapper, 1, b"").endswith(b"cel.expr.CheckedExpr"):
        raise Unreadable("not a CheckedExpr")
    expr: bytes = one(fields(one(wrapper, 2, b"")), 4, b"")  # CheckedExpr.expr
    return expr


@dataclass(frozen=True, slots=True)
class Node:
    """One node of the checked AST: its kind (``CONST``, ``IDENT``, ...) and what that kind holds.

    ``name`` is an identifier's name, a select's field, a call's function or a comprehension's iteration variable;
    ``value`` a constant's Python value (None for null, bytes for a bytes literal, a tag string for a duration or
    timestamp literal); ``children`` the operand (select), target then arguments (call: ``has_target`` says whether
    the first is a target), the elements (list), keys and values alternating (map or message literal), or range,
    init, condition, step and result (comprehension, whose accumulator is ``accu``).
    """

    kind: int
    name: str = ""
    value: Any = None
    children: tuple[Node, ...] = ()
    test_only: bool = False  # a select inside has()
    has_target: bool = False  # a call with a receiver: x.f(...)
    accu: str = ""  # a comprehension's accumulator variable
    two_variables: bool = False  # a comprehension with a second iteration variable


def _constant(f: dict[int, list[Any]]) -> Any:  # noqa: ANN401
    if 1 in f:
        return None
    if 2 in f:
        return bool(one(f, 2))
    if 3 in f:
        value = one(f, 3)
        return value - (1 << 64) if value >= _INT64 else value
    if 4 in f:
        return one(f, 4)
    if 5 in f:
        return struct.unpack("<d", one(f, 5))[0]
    if 6 in f:
        return one(f, 6).decode("utf-8")
    if 7 in f:
        return bytes(one(f, 7))
    return "duration" if 8 in f else "timestamp"


def read(buf: bytes) -> Node:
    """Return the tree of one ``cel.expr.Expr`` (bytes); raise ``Unreadable`` on anything else."""
    try:
        return _read(buf)
    except (IndexError, UnicodeDecodeError, struct.error, RecursionError) as e:
        raise Unreadable(str(e)) from e


def _read(buf: bytes) -> Node:
    f = fields(buf)
    if CONST in f:
        return Node(CONST, value=_constant(fields(one(f, CONST))))
    if IDENT in f:
        return Node(IDENT, name=one(fields(one(f, IDENT)), 1, b"").decode("utf-8"))
    if SELECT in f:
        s = fields(one(f, SELECT))
        return Node(SELECT, name=one(s, 2, b"").decode("utf-8"), children=(_read(one(s, 1, b"")),),
                    test_only=bool(one(s, 3, 0)))
    if CALL in f:
        c = fields(one(f, CALL))
        target = one(c, 1)
        args = tuple(_read(a) for a in c.get(3, []))
        return Node(CALL, name=one(c, 2, b"").decode("utf-8"),
                    children=((_read(target),) if target is not None else ()) + args, has_target=target is not None)
    if LIST in f:
        return Node(LIST, children=tuple(_read(e) for e in fields(one(f, LIST)).get(1, [])))
    if STRUCT in f:
        children: list[Node] = []
        for entry in fields(one(f, STRUCT)).get(2, []):
            e = fields(entry)
            key = _read(one(e, 3)) if 3 in e else Node(CONST, value=one(e, 2, b"").decode("utf-8"))
            children += [key, _read(one(e, 4, b""))]
        return Node(STRUCT, children=tuple(children))
    if COMPREHENSION in f:
        c = fields(one(f, COMPREHENSION))
        parts = tuple(_read(one(c, n, b"")) for n in (2, 4, 5, 6, 7))
        return Node(COMPREHENSION, name=one(c, 1, b"").decode("utf-8"), children=parts,
                    accu=one(c, 3, b"").decode("utf-8"), two_variables=8 in c)
    raise Unreadable("an expression node of no known kind")


def walk(node: Node) -> list[Node]:
    """Return ``node`` and every node below it, parents first."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        out.append(n)
        todo.extend(reversed(n.children))
    return out
