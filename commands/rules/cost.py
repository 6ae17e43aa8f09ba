"""What a guard may cost: an upper bound on its work, from cel-cpp's checked AST and the sizes of what it reads.

Why: a guard that passes every static check can still be quadratic in a user's document
(``command.document.items.all(x, x in command.document.catalog)``), and cel-cpp's own budget counts comprehension
iterations only, not the list scans inside them. So before any evaluator runs (cel-cpp or the Python translation,
``commands.rules.python_guards``), ``commands.rules.evaluate`` computes each guard's bound from the **weights** of
the members it reads and refuses the command ``RULE_ERROR`` naming the guard at which the running sum over the
command's guards passes ``MAX_GUARD_COST``. The bound is a function of the command's bytes and the object's state
alone, computed the same way whichever evaluator would answer: a replay decides identically.

A value's weight (``weight``) is 1 for null, a bool, a number or a timestamp, 1 + its length for a string, 1 + the
weights of its elements (and keys) for a list or map; a document or patch weighs its UTF-8 size (never less than
its parsed weight). Per node, in units (each node costs at least 1, so every step of a loop counts):

- ``==``, ``!=``, ``<``, ...: the smaller operand's weight (equality on lists and maps compares elements);
- ``x in c``: the weights of both (a list is scanned, each element compared); ``c[k]``: the key's weight;
- ``+``: both weights (string and list concatenation builds a new value);
- ``startsWith``/``endsWith``: the smaller weight; ``contains`` and ``matches``: the product of both weights (a
  substring search, and RE2 on text × pattern, are at worst that);
- a comprehension (``all``, ``exists``, ``exists_one``): its range, then at most ``min(n, CEL_MAX_ITERATIONS - 1)``
  times its condition and step, n being the range's length when it is a variable's member and its weight otherwise
  (cel-cpp stops an evaluation at its 10,000th iteration); an iteration variable weighs its range's weight, and
  nested loops multiply;
- any other function: the weights of its arguments.

``worst_case`` evaluates the same bound at the largest weights the API's input limits allow (``InputBounds``):
a guard over the budget there is refused at deploy, so a guard deployed under those limits never meets the runtime
budget on a command the API accepted. The runtime check is what stands for commands from any other producer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from commands.rules.bounds import CEL_MAX_ITERATIONS, MAX_GUARD_COST
from commands.rules.checked_ast import CALL, COMPREHENSION, CONST, IDENT, SELECT, Node

#: A guard's bound as a function of the weights of the members it reads ("var.member" -> weight, and
#: "var.member#" -> its length, ``length``).
CostFunction = Callable[[Mapping[str, int]], int]
_VARIABLES = ("state", "next", "command", "caller")
_LOGIC = frozenset(("_&&_", "_||_", "!_", "@not_strictly_false", "size", "-_"))
_COMPARE = frozenset(("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"))


def length(value: Any, value_weight: int) -> int:  # noqa: ANN401
    """Return how many elements a comprehension over ``value`` may visit: a list's or map's length, else its
    weight (an upper bound of any length)."""
    t = type(value)
    return len(value) if t is list or t is tuple or t is dict else value_weight


def weight(value: Any) -> int:  # noqa: ANN401 - any JSON value (or a timestamp)
    """Return the weight of a value (see the module): what a guard's work over it is measured in."""
    t = type(value)
    if t is str:
        return 1 + len(value)
    if t is list or t is tuple:
        return 1 + sum(weight(v) for v in value)
    if t is dict:
        return 1 + sum(weight(k) + weight(v) for k, v in value.items())
    return 1


def _literal_weight(node: Node) -> int:
    value = node.value
    return 1 + len(value) if isinstance(value, str | bytes) else 1


class _Coster:
    """Emits straight-line Python computing one guard's bound: each node's cost and weight in a local variable."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0

    def let(self, source: str) -> str:
        self.count += 1
        name = f"v{self.count}"
        self.lines.append(f"    {name} = {source}")
        return name

    def node(self, node: Node, scope: Mapping[str, str]) -> tuple[str, str]:  # noqa: PLR0911
        """Return the names of the locals holding ``node``'s cost and weight."""
        if node.kind == CONST:
            return "1", str(_literal_weight(node))
        if node.kind == IDENT:
            if node.name in scope:
                return "1", scope[node.name]
            return "1", self.let(f"_whole(W, {node.name!r})")  # a whole variable (refused at compile time)
        if node.kind == SELECT:
            operand = node.children[0]
            member = _member(node, scope)
            if member is not None:
                return "1", self.let(f"W.get({member!r}, 1)")
            c, w = self.node(operand, scope)
            return self.let(f"{c} + {1 + len(node.name)}"), "1" if node.test_only else w
        if node.kind == COMPREHENSION:
            return self.comprehension(node, scope)
        parts = [self.node(child, scope) for child in node.children]
        costs = " + ".join(["1", *(c for c, _ in parts)])
        weights = [w for _, w in parts]
        if node.kind != CALL:  # a list or map literal
            return self.let(costs), self.let(" + ".join(["1", *weights]))
        return self.call(node.name, costs, weights, parts)

    def call(self, name: str, costs: str, w: list[str], parts: list[tuple[str, str]]) -> tuple[str, str]:
        if name in _LOGIC:
            return self.let(costs), "1"
        if name == "_?_:_" and len(parts) == 3:
            (c0, _), (c1, w1), (c2, w2) = parts
            return self.let(f"1 + {c0} + max({c1}, {c2})"), self.let(f"max({w1}, {w2})")
        if name in _COMPARE and len(w) == 2 or name in ("startsWith", "endsWith") and len(w) == 2:
            return self.let(f"{costs} + min({w[0]}, {w[1]})"), "1"
        if name == "@in" and len(w) == 2:
            return self.let(f"{costs} + {w[0]} + {w[1]}"), "1"
        if name in ("_[_]", "_[?_]") and len(w) == 2:
            return self.let(f"{costs} + {w[1]}"), w[0]
        if name == "_+_" and len(w) == 2:
            return self.let(f"{costs} + {w[0]} + {w[1]}"), self.let(f"{w[0]} + {w[1]}")
        if name in ("contains", "matches") and len(w) == 2:
            return self.let(f"{costs} + {w[0]} * {w[1]}"), "1"
        total = " + ".join(["1", *w])
        return self.let(f"{costs} + {total}"), self.let(total)

    def comprehension(self, node: Node, scope: Mapping[str, str]) -> tuple[str, str]:
        rng, init, condition, step, result = node.children
        rc, rw = self.node(rng, scope)
        ic, iw = self.node(init, scope)
        member = _member(rng, scope)
        length = f"W.get({member + '#'!r}, {rw})" if member is not None else rw  # its elements, when known
        n = self.let(f"min({length}, {CEL_MAX_ITERATIONS - 1})")
        if init.kind == CONST:
            accu = iw  # all, exists (a bool), exists_one (an int): the accumulator never grows
        else:  # what map() and filter() build (refused in guards): each step adds at most one step's growth
            _, grown = self.node(step, {**scope, node.name: rw, node.accu: "0"})
            accu = self.let(f"{iw} + {n} * {grown}")
        inner = {**scope, node.name: rw, node.accu: accu}
        cc, _ = self.node(condition, inner)
        sc, _ = self.node(step, inner)
        tc, tw = self.node(result, inner)
        return self.let(f"1 + {rc} + {ic} + {n} * (1 + {cc} + {sc}) + {tc}"), tw


def _member(node: Node, scope: Mapping[str, str]) -> str | None:
    """Return ``var.member`` if ``node`` reads a variable's member (not a comprehension's variable), else None."""
    if node.kind == SELECT and not node.test_only:
        operand = node.children[0]
        if operand.kind == IDENT and operand.name in _VARIABLES and operand.name not in scope:
            return f"{operand.name}.{node.name}"
    return None


def _whole(weights: Mapping[str, int], var: str) -> int:
    return 1 + sum(w for name, w in weights.items() if name.startswith(var + ".") and not name.endswith("#"))


def cost_function(tree: Node) -> CostFunction:
    """Return the bound of a guard (its checked AST) as a function of the weights of the members it reads."""
    coster = _Coster()
    cost, _ = coster.node(tree, {})
    source = "\n".join(["def cost(W):", *coster.lines, f"    return {cost}"])
    namespace: dict[str, Any] = {"_whole": _whole}
    exec(compile(source, "<guard cost>", "exec"), namespace)  # noqa: S102 - our own arithmetic, no names from users
    function: CostFunction = namespace["cost"]
    return function


def over_budget(costs: list[CostFunction], weights: Mapping[str, int]) -> tuple[int, int] | None:
    """Return (index, running sum) of the first guard at which the sum of ``costs`` passes ``MAX_GUARD_COST``, or
    None when the guards' bounds together fit it."""
    total = 0
    for index, cost in enumerate(costs):
        total += cost(weights)
        if total > MAX_GUARD_COST:
            return index, total
    return None


@dataclass(frozen=True, slots=True)
class InputBounds:
    """The largest inputs the API lets a command carry: the weights ``worst_case`` assumes (see the module)."""

    document_bytes: int  # a document or patch (``app.limits``' max_document_bytes)
    id_bytes: int  # an object id, a command id, a principal
    editors: int
    readers: int
    groups: int
    group_bytes: int
    issuer_bytes: int

    def weights(self, tracked_bytes: int, tracked: tuple[str, ...]) -> dict[str, int]:
        """Return the largest weight of every member a guard may read, for a type whose tracked fields are
        bounded by ``tracked_bytes`` (their canonical JSON, which outweighs any one of them)."""
        ident, doc = 1 + self.id_bytes, self.document_bytes
        out = {"state.exists": 1, "state.deleted": 1, "state.version": 1, "state.owner": ident,
               "state.editors": 1 + self.editors * ident, "state.readers": 1 + self.readers * ident,
               "state.type": 1 + 64, "state.created_at": 1, "state.updated_at": 1,
               "caller.principal": ident, "caller.groups": 1 + self.groups * (1 + self.group_bytes),
               "caller.issuer": 1 + self.issuer_bytes, "command.kind": 1 + 16, "command.id": ident,
               "command.object_id": ident, "command.expected_version": 1, "command.issued_at": 1,
               "command.document": doc, "command.patch": doc, "command.editor": ident, "command.reader": ident,
               "command.type": 1 + 64}
        for name in tracked:
            out[f"state.{name}"] = out[f"next.{name}"] = tracked_bytes
        lengths = {"state.editors": self.editors, "state.readers": self.readers, "caller.groups": self.groups}
        return out | {name + "#": lengths.get(name, w) for name, w in out.items()}


def worst_case(cost: CostFunction, bounds: InputBounds, tracked_bytes: int, tracked: tuple[str, ...]) -> int:
    """Return a guard's bound at the largest inputs ``bounds`` allow (every weight at its largest: the bound only
    grows with each weight)."""
    return cost(bounds.weights(tracked_bytes, tracked))


def ranges(tree: Node) -> set[str]:
    """Return every ``var.member`` a comprehension of ``tree`` iterates over directly (whose length is priced)."""
    found: set[str] = set()

    def visit(node: Node, scope: frozenset[str]) -> None:
        if node.kind == COMPREHENSION:
            member = _member(node.children[0], dict.fromkeys(scope, ""))
            if member is not None:
                found.add(member)
            scope = scope | {node.name, node.accu}
        for child in node.children:
            visit(child, scope)

    visit(tree, frozenset())
    return found


def uniform_cap(costs: list[CostFunction], names: list[str]) -> int:
    """Return the largest weight K such that the guards fit the budget when every member in ``names`` weighs K (and
    is K long), or 0 when not even weights of 1 fit: a command whose every weight is at most K needs no more check
    (the bound only grows with each weight), so ``decide`` prices exactly only the commands with a larger input."""
    def fits(k: int) -> bool:
        return over_budget(costs, {n: k for name in names for n in (name, name + "#")}) is None

    if not fits(1):
        return 0
    low, high = 1, MAX_GUARD_COST + 1  # no member weighing over the budget fits (each read costs its weight at least)
    while low < high:  # the largest k that fits, in [low, high)
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low
