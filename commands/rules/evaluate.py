"""Applying a ``RuleSet`` to one command that Arbiter's generic checks accepted: the type's rules, in a fixed order.

``decide`` calls ``apply_rules`` at the very end, when every generic check has passed (ids, visibility, roles,
duplicates, existence, versions, sizes, JSON hygiene, grants), for a create that names a type and for any command
on a typed object. The first rule that fails decides:

- **create** (``object_type`` set): the type must be in the rules (else RULE_VIOLATED ``types``; with no rules
  deployed every type is unknown); ``create_schema`` checks the document (``<type>:create_schema``, pointer of the
  first error); the tracked fields are copied from the document and bounded (TOO_LARGE ``<type>:max_tracked_bytes``);
  each transition checks its field's first value; then each guard whose ``kinds`` has ``create``, in document order.
- **update** of a typed object: the type must still be in the rules (else RULE_VIOLATED ``types``: an update can not
  keep tracked fields true without its type's pointers); ``patch_schema`` checks the patch; the tracked fields
  after the merge patch (``commands.rules.tracked``) are bounded; each transition checks a field whose value
  changed; then the guards of kind ``update``.
- **delete, grant and revoke** on a typed object: the guards of that kind (``next`` is the tracked fields as they
  are); nothing if the type is no longer in the rules.

A transition of field F with map ``allowed`` (value -> values it may move to) and optional ``initial``: on create
F's value must be in ``initial`` (when given) or be null or a key of ``allowed``; on update, when F changes, the
new value must be a key of ``allowed`` (null is not: a tracked state is never removed), and reachable: from a key
of ``allowed`` only to its listed values; from null, or a value that is no key (set before the rule existed), only
to ``initial`` (or to any key when there is no ``initial``). Values compare as JSON (1 and true differ).

A guard runs on the command kinds it lists in ``kinds`` (default: create and update), in document order; a kind's
guards are answered in Python where that is certainly cel-cpp's answer (``commands.rules.python_guards``), and
otherwise evaluated by cel-cpp as chained programs (``TypeRules.by_kind``), with exactly the outcome of evaluating
them one by one. A guard is a CEL expression; true lets the command pass, false is RULE_VIOLATED with the guard's message and
pointers (given, or else the pointers of the tracked fields it mentions); an evaluation error (a missing map key, no
matching overload such as null > 1, overflow) or a value that is not a bool is RULE_ERROR with the guard's name and
the error as ``rule_message``. The variables, all maps:

- ``state``: ``exists``, ``deleted``, ``version``, ``owner``, ``editors``, ``readers``, ``type``, ``created_at``,
  ``updated_at`` (timestamps or null) and every tracked field by name, as before the command (null on create);
- ``next``: every tracked field by name as after the command (null where missing);
- ``command``: ``kind`` (``create``, ``update``, ``delete``, ``grant_editor``, ``revoke_editor``, ``grant_reader``,
  ``revoke_reader``), ``id``, ``object_id``, ``expected_version`` (or null), ``issued_at`` (a timestamp: the only
  clock a rule has), ``type``, ``editor``/``reader`` (or null), and ``document`` (create) or ``patch`` (update) as
  parsed JSON, null otherwise;
- ``caller``: ``principal``, ``groups`` (the names, without ``group:``) and ``issuer`` (or null) of the command.

Modes (``mode``, of the document or of one transition or guard; ``commands.rules.meta_schema.MODES``): a rule in
``enforce`` mode (the default) refuses what it fails, as above. A rule in ``warn`` or ``audit`` mode runs at the same
place and on the same inputs, and never refuses: its failure (RULE_VIOLATED or RULE_ERROR, with its message and
pointers) becomes a warning, and the rules after it run as if it had passed. The schemas take the document's mode;
the built-in ``types`` and ``max_tracked_bytes`` always enforce (they keep the state's tracked fields true and
bounded). Guards in warn or audit mode run after the kind's enforced guards pass, one by one through cel-cpp, on a
cost budget of their own; the enforced ones decide exactly as they would without them. A command an enforced rule
refuses carries no warnings (its rejection names the rule that refused it); an accepted one carries every warning,
in the order the rules ran (``Event.warnings``). The mode is part of the document, so of its digest and version:
promoting a rule to ``enforce`` is a new version, in force from its control record's offset, and every replay
decides (and warns) the same.

Nothing here raises: a rule's failure is a rejection. ``decide`` stays a pure function of (state, command, rules).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from commands.command import (
    Command,
    CreateObject,
    DeleteObject,
    GrantEditor,
    GrantReader,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    utf8_size,
)
from commands.errors import ReasonCode
from commands.rules.bounds import MAX_GUARD_COST, MAX_MESSAGE_BYTES, MAX_POINTER_BYTES, MAX_POINTERS
from commands.rules.cost import length, over_budget, weight
from commands.rules.document import pointer
from commands.rules.ruleset import ENFORCE, Guard, RuleSet, Transition, TypeRules
from commands.rules.trace import NOT_APPLICABLE, PASSED, REFUSED, WARNED, RuleStep, RuleTrace, json_value
from commands.rules.tracked import decode_tracked, encode_tracked, loads, patched_value, value_at
from commands.state import ObjectState

#: The name of each command class as CEL sees it in ``command.kind`` (and an explanation prints it).
KIND_OF = {CreateObject: "create", UpdateObject: "update", DeleteObject: "delete", GrantEditor: "grant_editor",
         RevokeEditor: "revoke_editor", GrantReader: "grant_reader", RevokeReader: "revoke_reader"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule refused the command: the reason code, the rule's qualified name, its message and pointers."""

    reason: ReasonCode
    rule: str
    message: str
    pointers: tuple[str, ...] = ()
    mode: str = "enforce"  # a warning's mode (warn or audit): that rule would have refused, and did not


def clip_bytes(text: str, limit: int) -> str:
    """Return ``text`` cut so that its UTF-8 form is at most ``limit`` bytes (with an ellipsis if cut)."""
    if utf8_size(text) <= limit:
        return text
    cut = text.encode("utf-8")[:limit - 3].decode("utf-8", "ignore")
    return cut + "…"


def _pointers(pointers: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(clip_bytes(p, MAX_POINTER_BYTES) for p in pointers[:MAX_POINTERS])


def _violated(rule: str, message: str, pointers: tuple[str, ...] | list[str] = (),
              reason: ReasonCode = ReasonCode.RULE_VIOLATED) -> Verdict:
    return Verdict(reason, rule, clip_bytes(message, MAX_MESSAGE_BYTES), _pointers(pointers))


def _failed(verdict: Verdict | None, mode: str, warnings: list[Verdict]) -> Verdict | None:
    """Return ``verdict`` if it refuses (a failure of a rule in enforce mode), else None, keeping it as a warning
    in ``warnings`` when a rule in warn or audit mode failed."""
    if verdict is None or mode == ENFORCE:
        return verdict
    warnings.append(Verdict(verdict.reason, verdict.rule, verdict.message, verdict.pointers, mode))
    return None


def _as_json(value: Any) -> str:  # noqa: ANN401
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _schema_verdict(validator: Any, value: Any, rules: TypeRules, what: str) -> Verdict | None:  # noqa: ANN401
    if validator is None or validator.is_valid(value):
        return None
    error = next(iter(validator.iter_errors(value)))  # jsonschema-rs reports in a fixed order for one input
    where = pointer(*error.instance_path)
    rule = f"{rules.name}:{'create_schema' if what == 'document' else 'patch_schema'}"
    return _violated(rule, f"{what} does not match the schema at {where or '/'}: {error.message}", [where or "/"])


def _bounded(rules: TypeRules, values: dict[str, Any]) -> tuple[Verdict | None, str | None]:  # noqa: ANN401
    text = encode_tracked(values)
    if text is not None and utf8_size(text) > rules.max_tracked_bytes:
        return _violated(f"{rules.name}:max_tracked_bytes", f"tracked fields are {utf8_size(text)} bytes, over the "
                         f"limit of {rules.max_tracked_bytes}", [p for p, v in values.items() if v is not None],
                         ReasonCode.TOO_LARGE), None
    return None, text


def _same(a: Any, b: Any) -> bool:  # noqa: ANN401
    """Return True if two JSON values are equal as JSON (1, 1.0 and true all differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict | list):
        return _as_json(a) == _as_json(b)
    return bool(a == b)


def _transition_verdict(t: Transition, old: Any, new: Any, creating: bool) -> Verdict | None:  # noqa: ANN401
    keys = t.allowed
    if creating:
        if t.initial is not None:
            ok = isinstance(new, str) and new in t.initial
        else:
            ok = new is None or (isinstance(new, str) and new in keys)
        if ok:
            return None
        return _violated(t.rule, t.message or f"{t.field} may not start as {_as_json(new)}", [t.pointer])
    if _same(old, new):
        return None
    if not isinstance(new, str) or new not in keys:
        return _violated(t.rule, t.message or f"{t.field} may not become {_as_json(new)}: not one of its states",
                         [t.pointer])
    if isinstance(old, str) and old in keys:
        reachable = keys[old]
    else:
        reachable = t.initial if t.initial is not None else frozenset(keys)
    if new in reachable:
        return None
    return _violated(t.rule, t.message or f"{t.field} may not move from {_as_json(old)} to {_as_json(new)}",
                     [t.pointer])


class _Scope:
    """One command's rule inputs, for the guards of its kind: what a refusal's message expression and a trace read."""

    __slots__ = ("command", "data", "enforced_data", "kind", "new", "old", "payload", "rules", "state", "trace")

    def __init__(self, rules: TypeRules, state: ObjectState | None, command: Command, kind: str,
                 old: dict[str, Any], new: dict[str, Any], payload: Any, trace: RuleTrace | None) -> None:  # noqa: ANN401
        self.rules, self.state, self.command, self.kind = rules, state, command, kind
        self.old, self.new, self.payload, self.trace = old, new, payload, trace
        self.data: dict[str, Any] | None = None
        self.enforced_data: dict[str, Any] | None = None

    def variables(self, enforced: bool = False) -> dict[str, Any]:
        """The guards' variables: with every member the type's guards read, or (``enforced``) only those its
        enforced guards and their messages read, so a rule in warn or audit mode never changes what they decide."""
        if enforced:
            if self.enforced_data is None:
                self.enforced_data = _variables(self.rules, self.state, self.command, self.kind, self.old, self.new,
                                                self.payload, self.rules.enforced_reads)
            return self.enforced_data
        if self.data is None:
            self.data = _variables(self.rules, self.state, self.command, self.kind, self.old, self.new, self.payload)
        return self.data

    def weights(self) -> dict[str, int]:
        return _weights(self.rules, self.state, self.command, self.kind, self.old, self.new)

    def refusal(self, g: Guard) -> Verdict:
        """Return guard ``g``'s RULE_VIOLATED verdict: its message expression's text, or its static message where
        it has none, or that expression passes the cost budget, fails, or gives no non-empty string."""
        return _violated(g.rule, self.message(g), g.pointers)

    def message(self, g: Guard) -> str:
        program = g.message_program
        if program is None or g.message_cost is None:
            return g.message
        if over_budget([g.message_cost], self.weights()) is not None:
            return g.message
        try:
            result = program.eval(data=self.variables(g.mode == ENFORCE))
        except Exception:  # noqa: BLE001 - deterministic: the same input fails the same way on every replay
            return g.message
        if result.type() != _cel().Type.STRING:
            return g.message
        text = result.value()
        return text if isinstance(text, str) and text.strip() else g.message


def _guards_verdict(scope: _Scope, warnings: list[Verdict]) -> Verdict | None:
    verdict, index = _enforced_verdict(scope)
    watching = scope.rules.watching.get(scope.kind)
    watched: dict[str, Verdict | None] = {}
    if verdict is None and watching:
        _watch(scope, watching, warnings, watched)
    if scope.trace is not None:
        _trace_guards(scope, verdict, index, watched)
    return verdict


def _trace_guards(scope: _Scope, verdict: Verdict | None, index: int, watched: dict[str, Verdict | None]) -> None:
    """Record each guard of the type in document order: the enforced ones before ``index`` passed, the one at it
    refused (``verdict``), later ones did not run; those in warn or audit mode as ``_watch`` answered them."""
    assert scope.trace is not None
    data = {var: {m: json_value(v) for m, v in members.items()} for var, members in scope.variables().items()}
    position = 0
    for g in scope.rules.guards:
        inputs = {f"{var}.{m}": data[var].get(m) for var, m in sorted(g.reads)}
        inputs.update((f"params.{name}", json.loads(value)) for name, value in g.params)  # the values inlined
        if scope.kind not in g.kinds:
            scope.trace.add(RuleStep(g.rule, "guard", g.mode, NOT_APPLICABLE, {"command.kind": scope.kind}))
            continue
        if g.mode == ENFORCE:
            if verdict is not None and position > index:
                return  # not run: an earlier guard refused
            if verdict is not None and position == index:
                scope.trace.add(RuleStep(g.rule, "guard", g.mode, REFUSED, inputs, verdict.reason.value,
                                         verdict.message))
                return
            position += 1
            scope.trace.add(RuleStep(g.rule, "guard", g.mode, PASSED, inputs))
        elif g.rule in watched:
            w = watched[g.rule]
            scope.trace.add(RuleStep(g.rule, "guard", g.mode, WARNED if w is not None else PASSED, inputs,
                                     w.reason.value if w is not None else None, w.message if w is not None else None))


def _watch(scope: _Scope, guards: tuple[Guard, ...], warnings: list[Verdict],
           watched: dict[str, Verdict | None]) -> None:
    """Evaluate the guards in warn or audit mode one by one (cel-cpp), adding each failure to ``warnings`` (and
    each answer to ``watched``, by rule).

    They are priced as a kind's enforced guards are, on their own budget: past it the guard at which the sum passes
    it is a RULE_ERROR warning and no later one is evaluated.
    """
    over = over_budget([g.cost for g in guards], scope.weights())
    data = scope.variables()
    for i, g in enumerate(guards):
        if over is not None and i == over[0]:
            verdict: Verdict | None = _violated(
                g.rule, f"not evaluated: the {scope.kind} guards in warn or audit mode up to this one could cost "
                f"{over[1]:,} units with this command's inputs, over the budget of {MAX_GUARD_COST:,} "
                "(commands.rules.cost)", g.pointers, ReasonCode.RULE_ERROR)
            watched[g.rule] = verdict
            _failed(verdict, g.mode, warnings)
            return
        verdict = _cel_verdict((g,), None, data, scope)
        watched[g.rule] = verdict
        _failed(verdict, g.mode, warnings)


def _enforced_verdict(scope: _Scope) -> tuple[Verdict | None, int]:
    """Return the verdict of the kind's enforced guards and the index (among them) of the one that refused (-1)."""
    rules, kind = scope.rules, scope.kind
    runs = rules.by_kind.get(kind)
    if not runs:
        return None, -1
    chosen = [g for guards, _ in runs for g in guards]
    weights = scope.weights()
    # Within the uniform cap every guard surely fits (the bound grows with each weight): priced only past it.
    over = over_budget([g.cost for g in chosen], weights) \
        if max(weights.values(), default=1) > rules.cost_caps.get(kind, 0) else None
    if over is not None:  # before any evaluator runs, so every path (and every replay) refuses it alike
        index, total = over
        g = chosen[index]
        return _violated(g.rule, f"not evaluated: the {kind} guards up to this one could cost {total:,} units with "
                         f"this command's inputs, over the budget of {MAX_GUARD_COST:,} (commands.rules.cost)",
                         g.pointers, ReasonCode.RULE_ERROR), index
    in_python = rules.in_python.get(kind)
    if in_python is not None:  # the guards in Python (commands.rules.python_guards): cel-cpp's outcome, or Defer
        state = scope.state
        try:
            index = in_python(scope.old, scope.new, state if state is not None and state.exists else None,
                              scope.command, kind, scope.payload)
        except Exception:  # noqa: BLE001, S110 - Defer, or anything unforeseen: cel-cpp decides, as below
            pass
        else:
            if index < 0:
                return None, -1
            return scope.refusal(chosen[index]), index
    data = scope.variables(enforced=True)
    offset = 0
    for guards, chain in runs:
        verdict = _cel_verdict(guards, chain, data, scope)
        if verdict is not None:
            return verdict, offset + next(i for i, g in enumerate(guards) if g.rule == verdict.rule)
        offset += len(guards)
    return None, -1


def _cel_verdict(guards: tuple[Guard, ...], chain: Any, data: dict[str, Any], scope: _Scope) -> Verdict | None:  # noqa: ANN401
    """Return the verdict of a run of guards evaluated by cel-cpp (``chain``, then one by one on an error).

    cel-cpp raises (rather than answering an error value) for a value it cannot hold (an integer over 64 bits) and
    past its iteration budget, which is per evaluation: a chain raising is evaluated one by one too, so each guard
    gets its own budget and an error names the guard that raised it.
    """
    cel = _cel()
    if chain is not None:  # one evaluation for the run: the index of its first false guard, or -1
        try:
            result = chain.eval(data=data)
        except Exception:  # noqa: BLE001, S110 - evaluated one by one below, naming the guard
            pass
        else:
            if result.type() == cel.Type.INT:
                index = result.value()
                if index < 0:
                    return None
                return scope.refusal(guards[index])
            # an error somewhere: evaluate one by one, in order, to name the guard (as if there were no chain)
    for g in guards:
        try:
            result = g.program.eval(data=data)
        except Exception as e:  # noqa: BLE001 - this guard's failure rejects the command naming it
            return _violated(g.rule, f"evaluation failed: {e}", g.pointers, ReasonCode.RULE_ERROR)
        kind_of = result.type()
        if kind_of == cel.Type.BOOL:
            if result.value() is True:
                continue
            return scope.refusal(g)
        if kind_of == cel.Type.ERROR:
            return _violated(g.rule, f"evaluation failed: {result.value()}", g.pointers, ReasonCode.RULE_ERROR)
        return _violated(g.rule, f"evaluation gave a {kind_of.name()}, not a bool", g.pointers,
                         ReasonCode.RULE_ERROR)
    return None


_CEL: list[Any] = []


def _cel() -> Any:  # noqa: ANN401 - the cel_expr_python.cel module, imported once (not at import: see the package)
    if not _CEL:
        from cel_expr_python import cel

        _CEL.append(cel)
    return _CEL[0]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamp(at: datetime | None) -> Any:  # noqa: ANN401 - a protobuf Timestamp, what cel-cpp takes in a map
    if at is None:
        return None
    from google.protobuf.timestamp_pb2 import Timestamp

    d = at - _EPOCH
    return Timestamp(seconds=d.days * 86_400 + d.seconds, nanos=d.microseconds * 1000)


_NO_STATE = {"exists": False, "deleted": False, "version": 0, "owner": "", "editors": [], "readers": [], "type": None,
             "created_at": None, "updated_at": None}
_STATE: dict[str, Callable[[ObjectState], Any]] = {
    "exists": lambda s: True, "deleted": lambda s: s.deleted, "version": lambda s: s.version,
    "owner": lambda s: s.owner, "editors": lambda s: list(s.editors), "readers": lambda s: list(s.readers),
    "type": lambda s: s.object_type, "created_at": lambda s: _timestamp(s.created_at),
    "updated_at": lambda s: _timestamp(s.updated_at)}
_COMMAND: dict[str, Callable[[Command], Any]] = {
    "id": lambda c: c.command_id, "object_id": lambda c: c.object_id, "expected_version": lambda c: c.expected_version,
    "issued_at": lambda c: _timestamp(c.issued_at),
    "editor": lambda c: c.editor if isinstance(c, GrantEditor | RevokeEditor) else None,
    "reader": lambda c: c.reader if isinstance(c, GrantReader | RevokeReader) else None}
_CALLER: dict[str, Callable[[Command], Any]] = {
    "principal": lambda c: c.principal, "groups": lambda c: list(c.groups), "issuer": lambda c: c.issuer}


def _command_member(member: str, rules: TypeRules, command: Command, kind: str, payload: Any) -> Any:  # noqa: ANN401
    if member == "kind":
        return kind
    if member == "type":
        return rules.name
    if member == "document":
        return payload if kind == "create" else None
    if member == "patch":
        return payload if kind == "update" else None
    return _COMMAND[member](command)


def _weights(rules: TypeRules, state: ObjectState | None, command: Command, kind: str,
             old: dict[str, Any], new: dict[str, Any]) -> dict[str, int]:  # noqa: ANN401
    """Return the weight (``commands.rules.cost``) of every member the type's guards read, and the length of those a
    comprehension iterates over ("var.member#"): a document or patch by its UTF-8 size (never less than its parsed
    weight, and not walked), anything else by its value."""
    out: dict[str, int] = {}
    live = state if state is not None and state.exists else None
    for key, var, m, iterated, ptr in rules.weighed:
        if ptr is not None:  # a tracked field
            value = old.get(ptr) if var == "state" else new.get(ptr)
        elif var == "command" and m in ("document", "patch"):
            out[key] = out[key + "#"] = command.size if kind == ("create" if m == "document" else "update") else 1
            continue
        elif var == "state":
            value = _STATE[m](live) if live is not None else _NO_STATE[m]
        elif var == "command":
            value = _command_member(m, rules, command, kind, None)
        else:
            value = _CALLER[m](command)
        w = out[key] = weight(value)
        if iterated:
            out[key + "#"] = length(value, w)
    return out


def _variables(rules: TypeRules, state: ObjectState | None, command: Command, kind: str,
               old: dict[str, Any], new: dict[str, Any], payload: Any,  # noqa: ANN401
               reads: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Return the four variables of a guard with the members ``reads`` names (default: those the type's guards
    read; see the module docstring)."""
    reads = rules.reads if reads is None else reads
    pointers = {name: ptr for name, ptr, _ in rules.tracked}
    live = state if state is not None and state.exists else None
    st = {m: old.get(pointers[m]) if m in pointers else _STATE[m](live) if live is not None else _NO_STATE[m]
          for m in reads["state"]}
    nxt = {m: new.get(pointers[m]) for m in reads["next"]}
    cmd = {m: _command_member(m, rules, command, kind, payload) for m in reads["command"]}
    caller = {m: _CALLER[m](command) for m in reads["caller"]}
    return {"state": st, "next": nxt, "command": cmd, "caller": caller}


def apply_rules(ruleset: RuleSet | None, state: ObjectState | None, command: Command,
                object_type: str) -> tuple[Verdict | None, str | None]:
    """Return (the verdict of the first failing rule in enforce mode, or None; the object's tracked text after the
    command).

    ``object_type`` is the command's type on create and the object's otherwise. See the module for the order.
    Never raises: anything unforeseen (a state whose tracked text is not JSON) is RULE_ERROR of rule ``types``.
    """
    verdict, text, _ = watched_rules(ruleset, state, command, object_type)
    return verdict, text


def watched_rules(ruleset: RuleSet | None, state: ObjectState | None, command: Command,
                  object_type: str, trace: RuleTrace | None = None) -> tuple[Verdict | None, str | None,
                                                                            tuple[Verdict, ...]]:
    """Return what ``apply_rules`` does and the warnings: every failure of a rule in warn or audit mode, in the
    order the rules ran (``Verdict.mode`` names the mode); none when an enforced rule refuses the command.

    With ``trace`` (``commands.rules.trace``), also record each rule as it ran, with its inputs and result.
    """
    warnings: list[Verdict] = []
    if trace is not None:
        trace.ran, trace.object_type = True, object_type
    try:
        verdict, text = _apply_rules(ruleset, state, command, object_type, warnings, trace)
    except Exception as e:  # noqa: BLE001 - a rule's failure rejects one command, it never stops the validator
        verdict = _violated("types", f"the rules could not be applied: {e!r}", (), ReasonCode.RULE_ERROR)
        _step(trace, "types", "types", ENFORCE, verdict, {})
        return verdict, None, ()
    return verdict, text, (() if verdict is not None else tuple(warnings))


def _step(trace: RuleTrace | None, rule: str, what: str, mode: str, verdict: Verdict | None,
          inputs: dict[str, Any], applies: bool = True) -> None:  # noqa: ANN401
    """Record one rule's answer in ``trace`` (if any): passed, refused (enforced) or warned, or not applicable."""
    if trace is None:
        return
    if not applies:
        trace.add(RuleStep(rule, what, mode, NOT_APPLICABLE, inputs))
    elif verdict is None:
        trace.add(RuleStep(rule, what, mode, PASSED, inputs))
    else:
        trace.add(RuleStep(rule, what, mode, REFUSED if mode == ENFORCE else WARNED, inputs, verdict.reason.value,
                           verdict.message))


def _named(rules: TypeRules, values: dict[str, Any]) -> dict[str, Any]:  # noqa: ANN401
    return {name: values.get(ptr) for name, ptr, _ in rules.tracked}


def _trace_transitions(trace: RuleTrace | None, rules: TypeRules, old: dict[str, Any], new: dict[str, Any],  # noqa: ANN401
                       why: str) -> None:
    """Record every transition as not applicable (``why``: the command changes no tracked field)."""
    if trace is not None:
        for t in rules.transitions:
            trace.add(RuleStep(t.rule, "transition", t.mode, NOT_APPLICABLE,
                               {"field": t.field, "before": old.get(t.pointer), "after": new.get(t.pointer),
                                "why": why}))


def _apply_rules(ruleset: RuleSet | None, state: ObjectState | None, command: Command,
                 object_type: str, warnings: list[Verdict],
                 trace: RuleTrace | None = None) -> tuple[Verdict | None, str | None]:
    rules = ruleset.types.get(object_type) if ruleset is not None else None
    kept = state.tracked if state is not None else None
    creating = isinstance(command, CreateObject)
    if rules is None:
        if creating or isinstance(command, UpdateObject):
            where = "no rules are deployed" if ruleset is None else f"rules version {ruleset.version} has no such type"
            unknown = _violated("types", f"type {object_type!r} is unknown: {where}")
            _step(trace, "types", "types", ENFORCE, unknown, {"type": object_type})
            return unknown, None
        _step(trace, "types", "types", ENFORCE, None, {"type": object_type}, applies=False)
        return None, kept
    assert ruleset is not None
    _step(trace, "types", "types", ENFORCE, None, {"type": object_type})
    kind = KIND_OF[type(command)]
    old = decode_tracked(kept)
    if trace is not None:
        trace.before = _named(rules, old)
    payload: Any = None
    verdict: Verdict | None
    if isinstance(command, CreateObject):
        payload = loads(command.document)
        verdict = _schema_verdict(rules.create_schema, payload, rules, "document")
        _step(trace, f"{rules.name}:create_schema", "schema", rules.schema_mode, verdict, {},
              rules.create_schema is not None)
        verdict = _failed(verdict, rules.schema_mode, warnings)
        if verdict is not None:
            return verdict, None
        new = {ptr: value_at(payload, tokens) for _, ptr, tokens in rules.tracked}
    elif isinstance(command, UpdateObject):
        payload = loads(command.patch)
        verdict = _schema_verdict(rules.patch_schema, payload, rules, "patch")
        _step(trace, f"{rules.name}:patch_schema", "schema", rules.schema_mode, verdict, {},
              rules.patch_schema is not None)
        verdict = _failed(verdict, rules.schema_mode, warnings)
        if verdict is not None:
            return verdict, None
        if payload.keys().isdisjoint(rules.first_tokens) and old.keys() <= rules.pointers and None not in old.values():
            # The patch names no tracked field and the state tracks nothing else: every value stays, and so does
            # the canonical text (the bound is checked again: a later rules version may have lowered it).
            new = {ptr: old.get(ptr) for _, ptr, _ in rules.tracked}
            if trace is not None:
                trace.after = _named(rules, new)
            if kept is not None and utf8_size(kept) > rules.max_tracked_bytes:
                verdict = _bounded(rules, new)[0]
                _step(trace, f"{rules.name}:max_tracked_bytes", "bound", ENFORCE, verdict,
                      {"bytes": utf8_size(kept), "limit": rules.max_tracked_bytes})
                return verdict, None
            _step(trace, f"{rules.name}:max_tracked_bytes", "bound", ENFORCE, None,
                  {"bytes": utf8_size(kept) if kept is not None else 0, "limit": rules.max_tracked_bytes},
                  bool(rules.tracked))
            _trace_transitions(trace, rules, old, new, "the patch names no tracked field")
            verdict = _guards_verdict(_Scope(rules, state, command, kind, old, new, payload, trace), warnings)
            return verdict, None if verdict is not None else kept
        # A field whose first token the patch does not name keeps its value (patched_value's first step, inline).
        new = {ptr: patched_value(old.get(ptr), tokens, payload) if tokens[0] in payload else old.get(ptr)
               for _, ptr, tokens in rules.tracked}
    else:
        new = old
    if trace is not None:
        trace.after = _named(rules, new)
    text = kept
    if new is not old:
        verdict, text = _bounded(rules, new)
        if trace is not None:
            size = utf8_size(text) if text is not None else 0
            _step(trace, f"{rules.name}:max_tracked_bytes", "bound", ENFORCE, verdict,
                  {"bytes": size if verdict is None else utf8_size(encode_tracked(new) or ""),
                   "limit": rules.max_tracked_bytes}, bool(rules.tracked))
        if verdict is not None:
            return verdict, None
        for t in rules.transitions:
            before, after = old.get(t.pointer), new.get(t.pointer)
            verdict = _transition_verdict(t, before, after, creating)
            _step(trace, t.rule, "transition", t.mode, verdict, {"field": t.field, "before": before, "after": after},
                  creating or not _same(before, after))
            verdict = _failed(verdict, t.mode, warnings)
            if verdict is not None:
                return verdict, None
    else:
        _trace_transitions(trace, rules, old, new, f"a {kind} changes no tracked field")
    verdict = _guards_verdict(_Scope(rules, state, command, kind, old, new, payload, trace), warnings)
    return verdict, None if verdict is not None else text
