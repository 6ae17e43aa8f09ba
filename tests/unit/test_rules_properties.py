"""Properties of decide under rules, on generated workloads: pure and deterministic, rejections change nothing,
and rules=None (or rules with untyped objects) is the decide of before rules existed, byte for byte."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import commands as commands_module
from commands import (
    Command,
    CreateObject,
    DeleteObject,
    GrantEditor,
    GrantReader,
    ObjectState,
    RevokeEditor,
    UpdateObject,
    decide,
)
from commands.rules import RuleSet
from schemas import codec
from tests.unit.rules_support import ORDER, T0, orders

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BEFORE_RULES = "e1cd77b"  # the last commit of main before issue 36: its decide is the oracle of rules=None
PRINCIPALS = ("alice", "bob", "carol")
GROUPS = ((), ("finance",), ("sales", "finance"), ("sales",))
STATUSES = ("draft", "submitted", "approved", "rejected", None, 7)
PATCH_MEMBERS = {
    "status": st.sampled_from(STATUSES),
    "amount": st.sampled_from((5, 10000, 10000.5, 20000, None, "lots", 2**70)),
    "customer": st.sampled_from(("acme", "globex", None)),
    "priority": st.sampled_from((1, 5, 6)),
    "title": st.sampled_from(("t", "x" * 201)),
}
patches = st.fixed_dictionaries({}, optional=PATCH_MEMBERS)
documents = st.builds(lambda changes: {**ORDER, **changes}, patches)  # the example order, some members changed


@st.composite
def commands(draw: st.DrawFn, typed: bool) -> list[Command]:
    """Draw a workload of commands over two objects, the creates typed ("order") or not."""
    out: list[Command] = []
    for i in range(draw(st.integers(1, 25))):
        oid = draw(st.sampled_from(("o1", "o2")))
        who = draw(st.sampled_from(PRINCIPALS))
        common: dict[str, Any] = {"groups": draw(st.sampled_from(GROUPS)), "issuer": "https://idp"}
        cid = f"c{draw(st.integers(0, 6))}"  # small id space: duplicates and reused keys happen
        at = T0 + timedelta(seconds=i)
        ev = draw(st.none() | st.integers(0, 4))
        kind = draw(st.sampled_from(("create", "update", "update", "update", "delete", "grant", "revoke", "read")))
        if kind == "create":
            doc = json.dumps({k: v for k, v in draw(documents).items() if v is not None})
            out.append(CreateObject(cid, oid, who, at, ev, document=doc, object_type="order" if typed else None,
                                    **common))
        elif kind == "update":
            out.append(UpdateObject(cid, oid, who, at, ev, patch=json.dumps(draw(patches)), **common))
        elif kind == "delete":
            out.append(DeleteObject(cid, oid, who, at, ev, **common))
        elif kind == "grant":
            out.append(GrantEditor(cid, oid, who, at, ev, editor=draw(st.sampled_from(PRINCIPALS)), **common))
        elif kind == "revoke":
            out.append(RevokeEditor(cid, oid, who, at, ev, editor=draw(st.sampled_from(PRINCIPALS)), **common))
        else:
            out.append(GrantReader(cid, oid, who, at, ev, reader=draw(st.sampled_from(PRINCIPALS)), **common))
    return out


def run(workload: list[Command], rules: RuleSet | None, decide_fn: Any = decide) -> list[bytes]:  # noqa: ANN401
    """Decide the workload in order and return every output's bytes: each outcome, then each state after it."""
    states: dict[str, ObjectState | None] = {}
    out = []
    for cmd in workload:
        before = states.get(cmd.object_id)
        decision = decide_fn(before, cmd) if rules is None else decide_fn(before, cmd, rules=rules)
        if not decision.accepted:
            assert decision.state is before
            if before is not None:
                assert codec.encode_state(decision.state) == codec.encode_state(before)
        states[cmd.object_id] = decision.state
        out.append(codec.encode_outcome(decision.outcome))
        out.append(b"" if decision.state is None else codec.encode_state(decision.state))
    return out


RULES = orders()
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(commands(typed=True))
def test_decide_with_rules_is_deterministic_and_a_rejection_keeps_the_state_bytes(workload: list[Command]) -> None:
    first = run(workload, RULES)
    assert run(workload, orders()) == first  # a fresh compile of the same document: the same bytes
    assert run(workload, RULES) == first


def _source_at(commit: str, path: str) -> str:
    """Return ``path`` as it was at ``commit``: vendored under tests/unit/before/ (a shallow clone has no history)."""
    return (ROOT / "tests" / "unit" / "before" / commit / f"{path}.txt").read_text()


def _module_before_rules(path: str) -> types.ModuleType:
    text = _source_at(BEFORE_RULES, path)
    module = types.ModuleType(f"before_rules_{path.replace('/', '_')[:-3]}")
    sys.modules[module.__name__] = module  # its dataclasses resolve annotations through sys.modules
    exec(compile(text, f"{BEFORE_RULES}:{path}", "exec"), module.__dict__)
    return module


def _legacy_decide() -> Any:  # noqa: ANN401
    """Return decide as it was before rules, with the fingerprint of then, over today's dataclasses."""
    command = _module_before_rules("commands/command.py")
    for name in ("CreateObject", "UpdateObject", "DeleteObject", "GrantEditor", "RevokeEditor", "GrantReader",
                 "RevokeReader"):
        setattr(command, name, getattr(commands_module, name))  # its functions see today's classes
    decide_module = _module_before_rules("commands/decide.py")
    decide_module.fingerprint = command.fingerprint  # type: ignore[attr-defined]
    return decide_module.decide


@pytest.fixture(scope="module")
def legacy() -> Any:  # noqa: ANN401
    return _legacy_decide()


@PROPERTY
@given(commands(typed=False))
def test_without_types_decide_is_the_decide_of_before_rules(legacy: Any, workload: list[Command]) -> None:  # noqa: ANN401
    before = run(workload, None, legacy)
    assert run(workload, None) == before
    with_rules = run(workload, RULES)
    assert [b for b in with_rules[1::2]] == before[1::2]  # the states are the same bytes
    expected = [codec.encode_outcome(replace(codec.decode_outcome(b), rules_version=RULES.version)) for b in before[::2]]
    assert with_rules[::2] == expected  # and the outcomes only name the rules version


json_values = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(("a", "b")),
                           lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("abc"), inner,
                                                                                       max_size=3), max_leaves=8)
objects = st.dictionaries(st.sampled_from("abc"), json_values, max_size=3)
tokens = st.lists(st.sampled_from("abc"), min_size=1, max_size=3).map(tuple)


@settings(max_examples=500, deadline=None)
@given(objects, st.lists(objects, max_size=4), tokens)
def test_a_tracked_value_is_what_the_pointer_gives_in_the_merge_patched_document(
        document: dict[str, Any], patch_list: list[dict[str, Any]], path: tuple[str, ...]) -> None:
    from commands.merge_patch import merge_patch
    from commands.rules.tracked import patched_value, value_at

    tracked = value_at(document, path)
    for patch in patch_list:
        document = merge_patch(document, patch)
        tracked = patched_value(tracked, path, patch)
        assert tracked == value_at(document, path), (document, patch, path)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(("/a", "/b", "/é")), json_values | st.floats(allow_nan=False, allow_infinity=False)
                       | st.integers() | st.text(max_size=4), max_size=3))
def test_tracked_text_is_json_dumps_canonical_and_reads_back_as_json_loads(values: dict[str, Any]) -> None:
    """The tracked codec's fast paths (one C encoder, the scanner without regexes) are json's own bytes and values."""
    from commands.rules.tracked import decode_tracked, encode_tracked, loads

    kept = {p: v for p, v in values.items() if v is not None}
    text = encode_tracked(values)
    assert text == (json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                    if kept else None)
    assert decode_tracked(text) == json.loads(text or "{}")
    spaced = json.dumps(kept)  # a patch as a client writes it: spaces, ASCII escapes
    assert loads(spaced) == json.loads(spaced)
    assert loads(" " + spaced) == json.loads(spaced)
    with pytest.raises(ValueError, match="Extra data"):  # what json.loads says, not the first object
        loads(spaced + " {}")


BEFORE_FAST = "515c718"  # main before the rules were made cheaper (guards in Python, fewer JSON passes)


def _apply_rules_before_fast() -> Any:  # noqa: ANN401
    """Return apply_rules as it was at BEFORE_FAST (its evaluate and tracked modules, over today's RuleSet)."""
    tracked = _module_before("commands/rules/tracked.py", BEFORE_FAST)
    sys.modules["before_fast_tracked"] = tracked
    source = _source_at(BEFORE_FAST, "commands/rules/evaluate.py")
    source = source.replace("from commands.rules.tracked import", "from before_fast_tracked import")
    module = types.ModuleType("before_fast_evaluate")
    sys.modules[module.__name__] = module
    exec(compile(source, f"{BEFORE_FAST}:commands/rules/evaluate.py", "exec"), module.__dict__)  # noqa: S102
    return module.apply_rules


def _module_before(path: str, commit: str) -> types.ModuleType:
    text = _source_at(commit, path)
    module = types.ModuleType(f"before_{commit}_{path.replace('/', '_')[:-3]}")
    sys.modules[module.__name__] = module
    exec(compile(text, f"{commit}:{path}", "exec"), module.__dict__)  # noqa: S102
    return module


def _plain(result: tuple[Any, str | None]) -> tuple[Any, ...]:  # noqa: ANN401
    """Return (verdict's fields or None, tracked text): the two modules' Verdict classes differ, their fields not."""
    verdict, text = result
    return (None if verdict is None else (verdict.reason, verdict.rule, verdict.message, verdict.pointers)), text


@pytest.fixture(scope="module")
def apply_before_fast() -> Any:  # noqa: ANN401
    return _apply_rules_before_fast()



@PROPERTY
@given(commands(typed=True), st.booleans())
def test_the_rules_decide_as_before_they_were_made_cheaper(apply_before_fast: Any, workload: list[Command],  # noqa: ANN401
                                                           fewer_fields: bool) -> None:
    """Every command of a workload gets the verdict and tracked text the rules gave at BEFORE_FAST, also after a
    rules version that tracks fewer fields (a state holding a pointer no longer tracked) or lowers the bound."""
    from commands.rules.evaluate import apply_rules
    from tests.unit.rules_support import with_rules

    later = RULES
    if fewer_fields:
        document = json.loads(RULES.document)
        order = document["types"]["order"]
        del order["tracked"]["customer"]
        order["guards"] = [g for g in order["guards"] if "customer" not in g["expr"]]
        order["max_tracked_bytes"] = 40
        later = with_rules(document, version=2)
    states: dict[str, ObjectState | None] = {}
    for i, cmd in enumerate(workload):
        rules = RULES if i < len(workload) // 2 else later
        before = states.get(cmd.object_id)
        object_type = cmd.object_type if isinstance(cmd, CreateObject) else before.object_type if before else None
        if object_type is not None:
            assert _plain(apply_rules(rules, before, cmd, object_type)) == \
                _plain(apply_before_fast(rules, before, cmd, object_type))
        states[cmd.object_id] = decide(before, cmd, rules=rules).state


@pytest.mark.parametrize("change", ["fewer fields", "lower bound", "a null in the state", "none"])
def test_a_patch_naming_no_tracked_field_decides_as_before(apply_before_fast: Any, change: str) -> None:  # noqa: ANN401
    """The shortcut for a patch that names no tracked field (the text is kept) gives what the full path gave."""
    from commands.rules.evaluate import apply_rules
    from tests.unit.rules_support import create_order, with_rules

    state = create_order(RULES).state
    assert state is not None
    document = json.loads(RULES.document)
    order = document["types"]["order"]
    if change == "fewer fields":
        del order["tracked"]["customer"]
        order["guards"] = [g for g in order["guards"] if "customer" not in g["expr"]]
    elif change == "lower bound":
        order["max_tracked_bytes"] = 40
    elif change == "a null in the state":
        state = replace(state, tracked='{"/amount":null,"/customer":"acme","/status":"draft"}')
    later = with_rules(document, version=2)
    cmd = UpdateObject("u1", "o1", "alice", T0 + timedelta(seconds=1), patch='{"title": "t"}')
    assert _plain(apply_rules(later, state, cmd, "order")) == _plain(apply_before_fast(later, state, cmd, "order"))
