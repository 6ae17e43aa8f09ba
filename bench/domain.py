"""Micro-benchmark of the validator's per-command cost: decode command and state, decide, encode outcome and state.

Run: ``.venv/bin/python -m bench.domain`` (``--number N`` to change the loop size).
"""

from __future__ import annotations

import argparse
import platform
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from app.native import loader as native  # first: it decides whether `commands` and `schemas` load compiled (app/native/loader.py)
from commands import Command, CreateObject, ObjectState, UpdateObject, decide
from schemas import codec

T0 = datetime(2025, 1, 1, tzinfo=UTC)
PATCH = '{"title": "hello world", "tags": ["a", "b"], "body": {"text": "' + "x" * 200 + '"}}'


def state_after(updates: int) -> ObjectState:
    """Return the state of an object created and then updated ``updates`` times."""
    cmds: list[Command] = [CreateObject("c0", "obj-1", "alice", T0, document='{"title": "first"}')]
    cmds += [UpdateObject(f"c{i}", "obj-1", "alice", T0 + timedelta(seconds=i), patch=f'{{"n": {i}}}')
             for i in range(1, updates + 1)]
    state: ObjectState | None = None
    for cmd in cmds:
        state = decide(state, cmd).state
    assert state is not None
    return state


def per_call_us(fn: Callable[[], object], number: int) -> float:
    """Return the best of five runs of ``fn`` in CPU microseconds per call.

    CPU time of this process, not wall time: the build machine is shared, and a descheduled loop would
    otherwise count other jobs' time as ours.
    """
    return min(timeit.repeat(fn, number=number, repeat=5, timer=time.process_time)) / number * 1e6


def pipeline(state_bytes: bytes, command_bytes: bytes) -> Callable[[], object]:
    """Return one validator step over encoded inputs, as the Spark job runs it."""
    def step() -> object:
        cmd = codec.decode_command(command_bytes)
        decision = decide(codec.decode_state(state_bytes), cmd)
        assert decision.state is not None
        return codec.encode_outcome(decision.outcome), codec.encode_state(decision.state)
    return step


def main() -> None:
    """Print per-command costs for a young object and one with a full dedup window."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=5000)
    n = parser.parse_args().number
    print(f"python {platform.python_version()} on {platform.machine()}, {n} calls x best of 5, CPU time; "
          f"domain: {native.status()}")
    for label, updates in (("young object, 3 recent", 2), ("full dedup window, 16 recent", 40)):
        report(label, state_after(updates), n)


def report(label: str, state: ObjectState, n: int) -> None:
    """Print the cost of each step and of the whole pipeline for one update against ``state``."""
    state_bytes = codec.encode_state(state)
    cmd = UpdateObject("new", "obj-1", "alice", T0 + timedelta(hours=1), expected_version=state.version, patch=PATCH)
    cmd_bytes = codec.encode_command(cmd)
    decision = decide(state, cmd)
    new_state = decision.state
    assert decision.accepted and new_state is not None
    parts: dict[str, Callable[[], object]] = {
        "decode command": lambda: codec.decode_command(cmd_bytes),
        "decode state": lambda: codec.decode_state(state_bytes),
        "decide": lambda: decide(state, cmd),
        "encode event": lambda: codec.encode_outcome(decision.outcome),
        "encode state": lambda: codec.encode_state(new_state),
    }
    print(f"\n{label} (state {len(state_bytes)} B, command {len(cmd_bytes)} B)")
    for name, fn in parts.items():
        print(f"  {name:<16} {per_call_us(fn, n):7.2f} us")
    print(f"  {'TOTAL pipeline':<16} {per_call_us(pipeline(state_bytes, cmd_bytes), n):7.2f} us")

if __name__ == "__main__":
    main()
