"""Compiling a rules document into a ``RuleSet``: what ``decide`` consults, built once per deployed version.

Refused at compile time (``RulesInvalid``, each problem with a JSON pointer into the document): anything the
published JSON Schema refuses (``commands.rules.meta_schema``); a create or patch schema that is not a valid Draft
2020-12 schema, names another draft, or has a ``$ref`` that is not inside the document (no I/O: nothing is fetched)
or a ``pattern`` outside the linear-time regex dialect; a tracked field named like a member of ``state``
(``commands.rules.expression.STATE_MEMBERS``) or two fields with one pointer; a transition of a field that is not
tracked, or whose ``initial`` or target values are not keys of ``allowed``; two rules of a type with one name, or a
rule named ``create_schema``, ``patch_schema``, ``max_tracked_bytes`` or ``types`` (the built-in rules' names); a
guard that does not compile or breaks the bounds in ``commands.rules.expression``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from commands.rules.bounds import DEFAULT_MAX_TRACKED_BYTES, MAX_GUARD_COST
from commands.rules.checked_ast import Node
from commands.rules.cost import CostFunction, InputBounds, cost_function, over_budget, ranges, uniform_cap
from commands.rules.document import RulesInvalid, canonical_json, parse_rules, parsed_rules, pointer, rules_digest
from commands.rules.expression import (
    STATE_MEMBERS,
    VARIABLES,
    compile_expression,
    compile_guard,
    new_environment,
    references,
)
from commands.rules.meta_schema import COMMAND_KINDS
from commands.rules.params import PARAMS, parameters_of, schema_problems, substitute
from commands.rules.python_guards import Run, translate
from commands.rules.tracked import parse_pointer

#: The mode of a rule that refuses what it fails (``commands.rules.meta_schema.MODES``).
ENFORCE = "enforce"

#: The names of the built-in rules (a document's rules may not take them): unknown type, the two schemas, the bound.
BUILTIN_RULES = ("types", "create_schema", "patch_schema", "max_tracked_bytes")
DEFAULT_KINDS = ("create", "update")
_DRAFT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True, slots=True)
class Transition:
    """A compiled transition rule: ``field``'s value may move from a key of ``allowed`` to one of its values."""

    rule: str  # qualified: "<type>:<name>"
    field: str
    pointer: str
    initial: frozenset[str] | None
    allowed: dict[str, frozenset[str]]
    message: str | None
    mode: str = "enforce"  # one of MODES: what a failure does (commands.rules.evaluate)


@dataclass(frozen=True, slots=True)
class Guard:
    """A compiled guard: a CEL program, the command kinds it runs on and the pointers a rejection names."""

    rule: str  # qualified: "<type>:<name>"
    program: Any  # a cel_expr_python Expression
    message: str
    kinds: frozenset[str]
    pointers: tuple[str, ...]
    cost: CostFunction  # its bound on the weights of what it reads (``commands.rules.cost``)
    mode: str = "enforce"  # one of MODES: what a failure does (commands.rules.evaluate)
    reads: frozenset[tuple[str, str]] = frozenset()  # (variable, member) it reads: a trace's inputs
    message_program: Any = None  # its ``message_expression`` compiled (a string-valued CEL program), or None
    message_cost: CostFunction | None = None  # that expression's bound, priced as a guard's
    # The parameters it (or its message expression) reads, ``params.<name>``: (name, canonical JSON of the value
    # inlined), in name order (``commands.rules.params``; a trace lists them with its inputs).
    params: tuple[tuple[str, str], ...] = ()
    text: str = ""  # its expression as compiled: with its parameters' values inline (what another evaluator runs)


@dataclass(frozen=True, slots=True)
class TypeRules:
    """The compiled rules of one type."""

    name: str
    create_schema: Any | None  # a jsonschema_rs validator
    patch_schema: Any | None
    tracked: tuple[tuple[str, str, tuple[str, ...]], ...]  # (name, pointer, tokens), in name order
    max_tracked_bytes: int
    transitions: tuple[Transition, ...]
    guards: tuple[Guard, ...]
    needs_document: bool  # some guard reads command.document
    needs_patch: bool  # some guard reads command.patch
    needs_times: bool  # some guard reads a timestamp (state.created_at, state.updated_at, command.issued_at)
    # Per command kind: its guards in runs of up to CHAIN, each run with one CEL program that gives the index of
    # the run's first false guard (-1 if none is), or None: one evaluation per run instead of one per guard.
    by_kind: dict[str, tuple[tuple[tuple[Guard, ...], Any], ...]] = field(default_factory=dict)
    # Per variable, the members some guard reads: only those are handed to CEL (a guard reads no other; the
    # compile-time check refuses indexed or whole-variable reads).
    reads: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The JSON pointers of ``tracked``, and their first tokens (the members of a patch that may change them).
    pointers: frozenset[str] = frozenset()
    first_tokens: frozenset[str] = frozenset()
    # Per command kind: its guards (all runs, in order) translated to Python, or None where one is not
    # (``commands.rules.python_guards``): the index of the first false guard, or -1; cel-cpp decides where it defers.
    in_python: dict[str, Run | None] = field(default_factory=dict)
    # What decide weighs before the guards run (``commands.rules.cost``): each member read, as ("var.member", var,
    # member, whether a comprehension iterates over it, its tracked pointer or None), and per command kind the
    # largest weight every member may have with the kind's guards surely within the budget (``uniform_cap``): past
    # it they are priced exactly.
    weighed: tuple[tuple[str, str, str, bool, str | None], ...] = ()
    cost_caps: dict[str, int] = field(default_factory=dict)
    # The mode of the two schemas (the document's), and per command kind the guards in warn or audit mode, in
    # document order: evaluated one by one after the enforced ones pass (``by_kind``, ``in_python`` and
    # ``cost_caps`` hold the enforced guards only, so they decide exactly as a document without the others).
    schema_mode: str = "enforce"
    watching: dict[str, tuple[Guard, ...]] = field(default_factory=dict)
    # ``reads`` of the enforced guards alone: what they are handed (cel-cpp converts every member it is given, and
    # refuses an integer beyond 64 bits in any of them, so a member only a watching guard reads must not reach them).
    enforced_reads: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unique: tuple[tuple[str, str], ...] = ()  # (tracked field name, pointer) of its unique fields (commands.unique)


@dataclass(frozen=True, slots=True)
class RuleSet:
    """One deployed version of the rules: its number, the digest and canonical text of its document, compiled.

    Built from its three fields alone (``__post_init__`` compiles the document and checks the digest), so it
    pickles and copies as (version, digest, document): compiled CEL and JSON Schemas do not pickle, and the
    mypyc build's pickling of frozen dataclasses (``app.native.loader``) rebuilds through the constructor too.
    """

    version: int
    digest: str
    document: str
    types: dict[str, TypeRules] = field(init=False, compare=False, repr=False)
    environment: Any = field(init=False, compare=False, repr=False)  # the cel-cpp Env the guards were built in

    def __post_init__(self) -> None:
        if self.version < 1:
            raise RulesInvalid([f"(version): {self.version} is not a version (1, 2, ...)"])
        value = parse_rules(self.document)
        if canonical_json(value) != self.document or rules_digest(self.document) != self.digest:
            raise RulesInvalid(["(document): not the canonical text of its digest; use compile_rules"])
        env = new_environment()
        problems: list[str] = []
        default_bound = value.get("max_tracked_bytes", DEFAULT_MAX_TRACKED_BYTES)
        mode = value.get("mode", ENFORCE)
        params = parameters_of(value)
        problems += schema_problems(value)
        types = {name: _compile_type(name, spec, default_bound, mode, env, problems, params=params)
                 for name, spec in sorted(value["types"].items())}
        if problems:
            raise RulesInvalid(problems)
        object.__setattr__(self, "types", types)
        object.__setattr__(self, "environment", env)

    def rule_names(self) -> tuple[str, ...]:
        """Return every name a rejection under this version may carry in ``rule`` (for ``arbiter rules check`` and
        per-rule metrics): ``types``, then per type its built-in rules in use and its own, in document order."""
        names = ["types"]
        for t in self.types.values():
            names += [f"{t.name}:{n}" for n, used in (("create_schema", t.create_schema is not None),
                                                       ("patch_schema", t.patch_schema is not None),
                                                       ("max_tracked_bytes", bool(t.tracked))) if used]
            names += [r.rule for r in t.transitions] + [g.rule for g in t.guards]
        return tuple(names)

    def watching(self) -> tuple[tuple[str, str], ...]:
        """Return (rule, mode) of every rule in warn or audit mode (``arbiter rules check`` lists them), in the
        order of ``rule_names``."""
        out = []
        for t in self.types.values():
            if t.schema_mode != ENFORCE:
                out += [(f"{t.name}:{n}", t.schema_mode) for n, used in (("create_schema", t.create_schema),
                                                                         ("patch_schema", t.patch_schema)) if used]
            out += [(r.rule, r.mode) for r in t.transitions if r.mode != ENFORCE]
            out += [(g.rule, g.mode) for g in t.guards if g.mode != ENFORCE]
        return tuple(out)

    def __reduce__(self) -> tuple[Any, tuple[int, str, str]]:
        """Pickle as (version, digest, document); loading compiles again."""
        return RuleSet, (self.version, self.digest, self.document)


def _refuse_retrieval(uri: str) -> Any:  # noqa: ANN401
    raise ValueError(f"rules are data: {uri} is not fetched (put the schema in the document, under $defs)")


def _compile_schema(schema: Any, at: str, problems: list[str]) -> Any:  # noqa: ANN401
    import jsonschema_rs

    if isinstance(schema, dict) and "$schema" in schema and schema["$schema"].rstrip("#") != _DRAFT:
        problems.append(f"{at}/$schema: only Draft 2020-12 ({_DRAFT}) is supported")
        return None
    try:
        return jsonschema_rs.Draft202012Validator(schema, retriever=_refuse_retrieval,
                                                  pattern_options=jsonschema_rs.RegexOptions())
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as e:
        problems.append(f"{at}: not a usable JSON Schema: {str(e).splitlines()[0][:300]}")
        return None


def _broken(at: str, broken: frozenset[str]) -> bool:
    """Return whether the published JSON Schema refused anything at or under pointer ``at``."""
    return any(b == at or b.startswith(at + "/") for b in broken)


def _compile_type(name: str, spec: dict[str, Any], default_bound: int, mode: str, env: Any,  # noqa: ANN401
                  problems: list[str], broken: frozenset[str] = frozenset(), *,
                  params: dict[str, Any] | None = None) -> TypeRules:
    """Compile one type's rules, adding each problem to ``problems``; the parts under a pointer in ``broken`` (where
    the published JSON Schema refused the document: ``document_problems``) are not compiled."""
    at = pointer("types", name)
    create = _compile_schema(spec["create_schema"], at + "/create_schema", problems) \
        if "create_schema" in spec and not _broken(at + "/create_schema", broken) else None
    patch = _compile_schema(spec["patch_schema"], at + "/patch_schema", problems) \
        if "patch_schema" in spec and not _broken(at + "/patch_schema", broken) else None
    tracked_spec: dict[str, str] = spec.get("tracked", {})
    seen_pointers: dict[str, str] = {}
    for field_name, ptr in sorted(tracked_spec.items()):
        if field_name in STATE_MEMBERS:
            problems.append(f"{at}/tracked/{field_name}: the name is a member of state ({', '.join(STATE_MEMBERS)})")
        if ptr in seen_pointers:
            problems.append(f"{at}/tracked/{field_name}: pointer {ptr} is tracked as {seen_pointers[ptr]} too")
        seen_pointers[ptr] = field_name
    tracked = tuple((n, p, parse_pointer(p)) for n, p in sorted(tracked_spec.items()))
    for i, unique_name in enumerate(spec.get("unique", ())):
        if unique_name not in tracked_spec:
            problems.append(f"{at}/unique/{i}: {unique_name!r} is not a tracked field of {name}")
    unique = tuple((n, tracked_spec[n]) for n in sorted(spec.get("unique", ())) if n in tracked_spec)
    names: set[str] = set()

    def rule_name(local: str, where: str) -> str:
        if local in BUILTIN_RULES:
            problems.append(f"{where}: {local!r} is the name of a built-in rule")
        elif local in names:
            problems.append(f"{where}: another rule of type {name} is named {local!r}")
        names.add(local)
        return f"{name}:{local}"

    transitions = []
    for i, t in enumerate(spec.get("transitions", []) if at + "/transitions" not in broken else ()):
        where = f"{at}/transitions/{i}"
        if _broken(where, broken):
            continue
        rule = rule_name(t["name"], where + "/name")
        if t["field"] not in tracked_spec:
            problems.append(f"{where}/field: {t['field']!r} is not a tracked field of {name}")
        allowed = {k: frozenset(v) for k, v in t["allowed"].items()}
        for key, targets in t["allowed"].items():
            for j, target in enumerate(targets):
                if target not in allowed:
                    problems.append(f"{where}/allowed/{pointer(key)[1:]}/{j}: {target!r} is not a key of allowed")
        for j, value in enumerate(t.get("initial", [])):
            if value not in allowed:
                problems.append(f"{where}/initial/{j}: {value!r} is not a key of allowed")
        transitions.append(Transition(rule, t["field"], tracked_spec.get(t["field"], ""),
                                      frozenset(t["initial"]) if "initial" in t else None, allowed, t.get("message"),
                                      t.get("mode", mode)))
    guards = []
    exprs: dict[str, str] = {}  # each guard's expression as compiled (its parameters' values inline)
    trees: list[Node] = []
    field_names = tuple(tracked_spec)
    read: set[tuple[str, str]] = set()
    read_enforced: set[tuple[str, str]] = set()
    for i, g in enumerate(spec.get("guards", []) if at + "/guards" not in broken else ()):
        where = f"{at}/guards/{i}"
        if _broken(where, broken):
            continue
        rule = rule_name(g["name"], where + "/name")
        expr, read_params, why = _with_params(g["expr"], params)
        program, tree, why = compile_guard(env, expr, field_names, written=g["expr"]) if not why else (None, None, why)
        problems += [f"{where}/expr: {p}" for p in why]
        reads_of = references(tree) if tree is not None else set()
        read |= reads_of
        if g.get("mode", mode) == ENFORCE:
            read_enforced |= reads_of
        pointers = tuple(g["pointers"]) if "pointers" in g else tuple(
            p for n, p, _ in tracked if ("next", n) in reads_of or ("state", n) in reads_of)
        cost = cost_function(tree) if tree is not None else _free
        trees += [tree] if tree is not None else []
        message_program, message_cost = None, None
        if "message_expression" in g:
            text, message_params, why = _with_params(g["message_expression"], params)
            read_params |= message_params
            message_program, message_tree, why = compile_guard(env, text, field_names, message=True,
                                                               written=g["message_expression"]) \
                if not why else (None, None, why)
            problems += [f"{where}/message_expression: {p}" for p in why]
            if message_tree is not None:
                read |= references(message_tree)
                if g.get("mode", mode) == ENFORCE:  # an enforced guard's refusal, message included, is enforced
                    read_enforced |= references(message_tree)
                trees.append(message_tree)
                message_cost = cost_function(message_tree)
        guards.append(Guard(rule, program, g["message"], frozenset(g.get("kinds", DEFAULT_KINDS)), pointers, cost,
                            g.get("mode", mode), frozenset(reads_of), message_program, message_cost,
                            tuple((n, canonical_json(params[n])) for n in sorted(read_params) if params is not None
                                  and n in params), expr))
        exprs[rule] = expr
    needs_document = ("command", "document") in read
    needs_patch = ("command", "patch") in read
    needs_times = not read.isdisjoint({("state", "created_at"), ("state", "updated_at"), ("command", "issued_at")})
    by_kind: dict[str, tuple[tuple[tuple[Guard, ...], Any], ...]] = {}
    in_python: dict[str, Run | None] = {}
    enforced = [g for g in guards if g.mode == ENFORCE]
    watching = {kind: tuple(g for g in guards if kind in g.kinds and g.mode != ENFORCE) for kind in COMMAND_KINDS}
    reads = {var: tuple(sorted(m for v, m in read if v == var)) for var in VARIABLES}
    enforced_reads = {var: tuple(sorted(m for v, m in read_enforced if v == var)) for var in VARIABLES}
    if not problems:
        by_name = {n: p for n, p, _ in tracked}
        for kind in COMMAND_KINDS:
            chosen = [g for g in enforced if kind in g.kinds]
            runs = [tuple(chosen[i:i + CHAIN]) for i in range(0, len(chosen), CHAIN)]
            by_kind[kind] = tuple((run, _chain(env, [exprs[g.rule] for g in run])) for run in runs)
            in_python[kind] = translate([g.program for g in chosen], enforced_reads, name, by_name) if chosen else None
    iterated = set().union(*(ranges(t) for t in trees))
    tracked_at = {n: p for n, p, _ in tracked}
    weighed = tuple((f"{v}.{m}", v, m, f"{v}.{m}" in iterated, tracked_at.get(m) if v in ("state", "next") else None)
                    for v in VARIABLES for m in reads.get(v, ()))
    members = [key for key, *_ in weighed]
    cost_caps = {kind: uniform_cap([g.cost for g in enforced if kind in g.kinds], members) for kind in by_kind}
    return TypeRules(name, create, patch, tracked, spec.get("max_tracked_bytes", default_bound), tuple(transitions),
                     tuple(guards), needs_document, needs_patch, needs_times, by_kind, reads,
                     frozenset(p for _, p, _ in tracked), frozenset(t[0] for _, _, t in tracked), in_python,
                     weighed, cost_caps, mode, {k: v for k, v in watching.items() if v}, enforced_reads,
                     unique)


def _with_params(expr: str, params: dict[str, Any] | None) -> tuple[str, set[str], list[str]]:
    """Return ``expr`` with its parameters' values inline, the parameters it reads, and its problems (a parameter
    the document does not declare): ``commands.rules.params``."""
    if params is None or PARAMS not in expr:  # None: the document's parameters are refused, unknown here
        return expr, set(), []
    return substitute(expr, params)


def _free(weights: Mapping[str, int]) -> int:
    return 0  # the cost of a guard that did not compile: never used (the document is refused)


def worst_case_problems(rules: RuleSet, bounds: InputBounds) -> list[str]:
    """Return a problem for every command kind whose guards together could cost more than ``MAX_GUARD_COST`` with
    the largest inputs ``bounds`` allow (naming the guard at which the sum passes it); [] if none could.

    Deploys check this (``app.rules.deploy``); a shard does not (a version deployed under other limits must still
    switch): there the runtime budget decides (``commands.rules.evaluate``).
    """
    problems: list[str] = []
    for t in rules.types.values():
        weights = bounds.weights(t.max_tracked_bytes, tuple(name for name, _, _ in t.tracked))
        for kind in COMMAND_KINDS:
            chosen = [g for g in t.guards if kind in g.kinds]
            over = over_budget([g.cost for g in chosen], weights)
            if over is None:
                continue
            index, total = over
            at = pointer("types", t.name, "guards", t.guards.index(chosen[index]), "expr")
            alone = chosen[index].cost(weights)
            problems.append(f"{at}: with the largest inputs the API accepts (a document of {bounds.document_bytes} "
                            f"bytes, {t.max_tracked_bytes} tracked bytes) this guard costs up to {alone:,} units"
                            f"{f' and the {kind} guards up to it {total:,}' if total != alone else ''}, over the "
                            f"budget of {MAX_GUARD_COST:,} (a loop over one input that scans or compares another "
                            "for each element is quadratic: bound it, e.g. by comparing sizes first, or check a "
                            "tracked field)")
    for t in rules.types.values():  # a message expression is priced alone, on the same budget
        weights = bounds.weights(t.max_tracked_bytes, tuple(name for name, _, _ in t.tracked))
        for i, g in enumerate(t.guards):
            cost = g.message_cost(weights) if g.message_cost is not None else 0
            if cost > MAX_GUARD_COST:
                problems.append(f"{pointer('types', t.name, 'guards', i, 'message_expression')}: with the largest "
                                f"inputs the API accepts it costs up to {cost:,} units, over the budget of "
                                f"{MAX_GUARD_COST:,}")
    return list(dict.fromkeys(problems))


#: The most guards one chained program holds (cel-cpp refuses an expression nested deeper than 32).
CHAIN = 6


def _chain(env: Any, exprs: list[str]) -> Any:  # noqa: ANN401
    """Return one program giving the index of the first false expression (-1 if none), or None (one expression,
    or a chain too deep for cel-cpp: then they are evaluated one by one)."""
    if len(exprs) < 2:
        return None
    # Each expression ends its line: a trailing ``//`` comment must not swallow the rest of the chain.
    program, _ = compile_expression(env, " : ".join(f"!({e}\n) ? {i}" for i, e in enumerate(exprs)) + " : -1",
                                    int_result=True)
    return program


def document_problems(document: str | bytes) -> list[str]:
    """Return every problem of a rules document in one pass ([] if it compiles): where the published JSON Schema
    refuses it, and, in the types whose tracked fields it does not refuse, what compiling their other well-formed
    parts finds (schemas, transitions, CEL guards and message expressions), in that order.

    ``arbiter rules check``, ``rules deploy`` and ``PUT /rules`` report these (``app.rules.deploy.check``): a user
    fixing the meta-schema's complaints does not meet the CEL ones only on the next try.
    """
    value, errors = parsed_rules(document)
    if not errors:
        try:
            compile_rules(canonical_json(value), version=1)
        except RulesInvalid as e:
            return list(e.problems)
        return []
    problems = [f"{at or '/'}: {message}" for at, message in errors]
    broken = frozenset(at for at, _ in errors)
    types = value.get("types") if isinstance(value, dict) else None
    if not isinstance(types, dict):
        return problems
    env = new_environment()
    bound = value.get("max_tracked_bytes", DEFAULT_MAX_TRACKED_BYTES)
    mode = value.get("mode", ENFORCE)
    for name, spec in sorted(types.items()):
        at = pointer("types", name)
        if not isinstance(spec, dict) or not isinstance(spec.get("tracked", {}), dict) \
                or _broken(at + "/tracked", broken):
            continue  # what the rules of this type read is unknown: nothing more to check soundly
        _compile_type(name, spec, bound, mode, env, problems, broken,
                      params=None if _broken("/parameters", broken) else parameters_of(value))
    return list(dict.fromkeys(problems))


def compile_rules(document: str, *, version: int) -> RuleSet:
    """Compile a rules document (YAML or JSON text, canonical or not) as version ``version``; raise RulesInvalid.

    The same document compiles to the same decisions in every process: nothing here reads a clock, the
    environment or a file, and the ``RuleSet`` keeps the canonical text it was compiled from.
    """
    canonical = canonical_json(parse_rules(document))
    return RuleSet(version, rules_digest(canonical), canonical)
