"""Micro-benchmark of the team's rules: CPU per decision with no rules, a realistic rule set and a heavy one.

Run: ``.venv/bin/python -m bench.domain_rules`` (``--number N`` calls per measurement, ``--profile`` for a cProfile
of the realistic case). One process, one sitting: the ratios are to the no-rules figure of the same run.

- **no rules**: an update of an untyped object, ``decide(state, cmd)``;
- **realistic**: the same update of an ``order`` under one patch schema, one transition map and five guards (the
  issue's goal: at most 1.25x the CPU of no rules);
- **heavy**: 64 tracked fields, a patch schema with 64 properties and patterns, two transition maps and 32 guards,
  each with a comprehension over the caller's groups.

Each is measured for ``decide`` alone and for the validator's whole step (decode command and state, decide, encode
outcome and state), in CPU time (best of five).

``--core``: the shard server's step through the compiled core instead (``app.validator.rocks.core_step``): one
``decide_batch`` call over a batch of 500 keys, each a stored state and one command, plus the Python step for every
key the core hands back, per decision; the realistic set is also measured without its guards (schema, transition
map, tracked fields: what the core decides itself since issue 49; a kind with guards goes back to the Python fold).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from app.native import loader as native  # first: it decides whether `commands` and `schemas` load compiled
from commands import CreateObject, ObjectState, UpdateObject, decide
from commands.rules import RuleSet, compile_rules
from schemas import codec

T0 = datetime(2025, 1, 1, tzinfo=UTC)
GOAL = 1.25  # issue 36: a realistic rule set costs at most 25 % more CPU per decision than no rules
GROUPS = ("sales", "emea", "finance")

REALISTIC = {"rules": 1, "types": {"order": {
    "patch_schema": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 200}, "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        "amount": {"type": "number", "minimum": 0}, "status": {"enum": ["draft", "submitted", "approved", "rejected"]},
        "note": {"type": "string"}}},
    "tracked": {"status": "/status", "amount": "/amount", "customer": "/customer", "priority": "/priority"},
    "transitions": [{"name": "flow", "field": "status", "initial": ["draft"], "allowed": {
        "draft": ["submitted"], "submitted": ["approved", "rejected"], "approved": [], "rejected": []}}],
    "guards": [
        {"name": "finance", "message": "approval over 10,000 needs finance", "kinds": ["update"],
         "expr": "!(next.status == 'approved' && state.status != 'approved' && next.amount > 10000) "
                 "|| 'finance' in caller.groups"},
        {"name": "customer", "message": "customer is immutable", "kinds": ["update"],
         "expr": "next.customer == state.customer"},
        {"name": "amount", "message": "amount may not grow after submit", "kinds": ["update"],
         "expr": "state.status == 'draft' || next.amount <= state.amount"},
        {"name": "priority", "message": "priority 5 is for managers", "kinds": ["update"],
         "expr": "next.priority != 5 || 'managers' in caller.groups || state.owner == caller.principal"},
        {"name": "owner-or-editor", "message": "closed orders are read-only", "kinds": ["update"],
         "expr": "!(state.status in ['approved', 'rejected']) || next.status == state.status"}]}}}


def heavy() -> dict[str, object]:
    """Return a rules document at the heavy end: many fields, properties, patterns and guards."""
    tracked = {f"f{i}": f"/f{i}" for i in range(60)} | {"status": "/status", "amount": "/amount",
                                                         "customer": "/customer", "priority": "/priority"}
    props = {f"f{i}": {"type": "string", "pattern": "^[a-z0-9-]{0,40}$"} for i in range(60)}
    props |= REALISTIC["types"]["order"]["patch_schema"]["properties"]  # type: ignore[index]
    guards = [{"name": f"g{i}", "message": f"guard {i}", "kinds": ["update"],
               "expr": f"caller.groups.exists(g, g == 'group-{i}') || next.f{i} == state.f{i} || next.amount >= {i}"}
              for i in range(32)]
    order = dict(REALISTIC["types"]["order"])  # type: ignore[arg-type]
    transitions = [*order["transitions"], {"name": "f0-flow", "field": "f0", "allowed": {"a": ["b"], "b": ["a"]}}]
    return {"rules": 1, "types": {"order": order | {"tracked": tracked, "guards": guards, "transitions": transitions,
                                                    "patch_schema": {"type": "object", "properties": props}}}}


def per_call_us(fn: Callable[[], object], number: int) -> float:
    """Return the best of five runs of ``fn`` in CPU microseconds per call."""
    return min(timeit.repeat(fn, number=number, repeat=5, timer=time.process_time)) / number * 1e6


def setting(rules: RuleSet | None) -> tuple[ObjectState, UpdateObject]:
    """Return a submitted order (typed when ``rules``) with 3 recent commands and an approving update by finance."""
    doc = {"title": "six chairs", "priority": 3, "customer": "acme", "amount": 20000, "status": "draft",
           **{f"f{i}": "a" for i in range(60)}}
    typed = "order" if rules is not None else None
    state = decide(None, CreateObject("c0", "obj-1", "alice", T0, document=json.dumps(doc), object_type=typed),
                   rules=rules).state
    for i, patch in enumerate(({"note": "n1"}, {"status": "submitted"}), 1):
        state = decide(state, UpdateObject(f"c{i}", "obj-1", "alice", T0 + timedelta(seconds=i),
                                           patch=json.dumps(patch), groups=GROUPS), rules=rules).state
    assert state is not None
    cmd = UpdateObject("new", "obj-1", "alice", T0 + timedelta(hours=1), expected_version=state.version, groups=GROUPS,
                       patch='{"status": "approved", "note": "ok by finance", "priority": 4}')
    assert decide(state, cmd, rules=rules).accepted
    return state, cmd


def measure(rules: RuleSet | None, n: int) -> tuple[float, float]:
    """Return CPU microseconds of decide alone and of the validator's whole step, for one approving update."""
    state, cmd = setting(rules)
    state_bytes, cmd_bytes = codec.encode_state(state), codec.encode_command(cmd)

    def step() -> object:
        decision = decide(codec.decode_state(state_bytes), codec.decode_command(cmd_bytes), rules=rules)
        assert decision.state is not None
        return codec.encode_outcome(decision.outcome), codec.encode_state(decision.state)

    return per_call_us(lambda: decide(state, cmd, rules=rules), n), per_call_us(step, n)


def measure_core(rules: RuleSet | None, n: int, keys: int = 500) -> tuple[float, int]:
    """Return CPU microseconds per decision of the shard's core step over ``keys`` copies of the setting's update,
    and how many of the batch's keys the core handed back."""
    import inspect
    import struct
    import tempfile

    from app.native import core as core_loader
    from app.settings import Settings
    from app.validator.fold import InputRecord
    from app.validator.murmur2 import partition_for
    from app.validator.rocks import core_step

    core = core_loader.load("auto")
    if core is None:
        raise SystemExit(f"no compiled core: {core_loader.status()}")
    state, cmd = setting(rules)
    now_ms = 1_800_000_000_000
    raw = struct.pack(">q", now_ms) + codec.encode_state(state)
    value = codec.encode_command(cmd)
    record = InputRecord(b"obj-1", value, "commands", 0, 0, None)
    settings = Settings(var_dir=tempfile.mkdtemp(prefix="bench-core-"), allow_unsigned_commands=True)
    partition = partition_for(b"obj-1", settings.partitions)  # the record's own partition: the core decides it
    if "ruleset" in inspect.signature(core_step.core_config).parameters:  # this commit's signature
        config = core_step.core_config(core, settings, partition, now_ms, rules)
    else:  # before issue 49's typed objects (main at 3f1938e): the version only
        config = core_step.core_config(settings, partition, now_ms, rules.version if rules is not None else None)
    names, raws, groups = [b"obj-1"] * keys, [raw] * keys, [[record]] * keys

    def batch() -> int:
        back = 0
        for result in core_step.decide_keys(core, config, names, raws, groups):
            if type(result) is int:  # the Python fold's step, as the shard runs it for a key handed back
                back += 1
                decision = decide(codec.decode_state(raw[8:]), codec.decode_command(value), rules=rules)
                assert decision.state is not None
                codec.encode_outcome(decision.outcome), codec.encode_state(decision.state)
        return back

    return per_call_us(batch, max(1, n // keys)) / keys, batch()


def main_core(n: int) -> None:
    """Print CPU per decision of the shard's core step with no rules, the realistic set and it without guards."""
    from app.native import core as core_loader

    unguarded = {"rules": 1, "types": {"order": {k: v for k, v in REALISTIC["types"]["order"].items()  # type: ignore[index]
                                                 if k != "guards"}}}
    cases = {"no rules": None, "realistic (1 schema, 1 map, 5 guards)": compile_rules(json.dumps(REALISTIC), version=1),
             "realistic without its guards (1 schema, 1 map)": compile_rules(json.dumps(unguarded), version=1)}
    print(f"python {platform.python_version()}; {core_loader.status()}")
    base = None
    for label, rules in cases.items():
        us, back = measure_core(rules, n)
        base = base or us
        print(f"  {label:<50} {us:7.2f} us {us / base:5.2f}x  (keys handed back: {back} of 500)")


def main() -> None:
    """Print CPU per decision for the three cases and their ratios to no rules."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=3000)
    parser.add_argument("--profile", action="store_true", help="cProfile the realistic case's decide")
    parser.add_argument("--print-realistic", action="store_true",
                        help="print the realistic rules document (JSON) and exit: for bench.validator --rules FILE")
    parser.add_argument("--core", action="store_true",
                        help="measure the shard server's step through the compiled core instead (see the module)")
    args = parser.parse_args()
    if args.core:
        main_core(args.number)
        return
    if args.print_realistic:
        print(json.dumps(REALISTIC, indent=1))
        return
    n = args.number
    realistic = compile_rules(json.dumps(REALISTIC), version=1)
    cases = {"no rules": None, "realistic (1 schema, 1 transition map, 5 guards)": realistic,
             "heavy (64 tracked, 64-property schema, 2 maps, 32 guards)": compile_rules(json.dumps(heavy()), version=2)}
    print(f"python {platform.python_version()} on {platform.machine()}, {n} calls x best of 5, CPU time; "
          f"domain: {native.status()}")
    base: tuple[float, float] | None = None
    ratios: dict[str, tuple[float, float]] = {}
    print(f"  {'case':<58} {'decide':>9} {'ratio':>6} {'step':>9} {'ratio':>6}")
    for label, rules in cases.items():
        d, s = measure(rules, n)
        base = base or (d, s)
        ratios[label] = (d / base[0], s / base[1])
        print(f"  {label:<58} {d:7.2f} us {d / base[0]:5.2f}x {s:7.2f} us {s / base[1]:5.2f}x")
    decide_ratio, step_ratio = ratios["realistic (1 schema, 1 transition map, 5 guards)"]
    verdict = "MET" if step_ratio <= GOAL else "NOT MET"
    print(f"goal (issue 36): the realistic step at most {GOAL:.2f}x no rules: {verdict} ({step_ratio:.2f}x; "
          f"decide alone {decide_ratio:.2f}x)")
    if args.profile:
        state, cmd = setting(realistic)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(n):
            decide(state, cmd, rules=realistic)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
