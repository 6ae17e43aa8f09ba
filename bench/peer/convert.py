"""The peer's JSONL commands as Arbiter's: same ids, objects, order and mix; and what each rule set decides.

Mapping (one line of ``commands.jsonl`` → one Arbiter command, in file order):

- ``CREATE`` → ``CreateObject`` (document ``{}``), ``UPDATE`` → ``UpdateObject`` (merge patch ``{}``),
  ``DELETE`` → ``DeleteObject``; ``command_id``, ``object_id`` and ``expected_version`` as they are; ``ts``
  (ms) → ``issued_at``.
- ``principal``: Arbiter authorizes (only the owner or an editor may change an object); the peer does not. Every
  command on an object is sent as that object's first principal in the file, so no command is FORBIDDEN and
  the decisions stay the peer's. A resend keeps its principal in the peer's stream, so duplicates stay duplicates.

Reason codes map by name (VALID = an event). Where the rules differ, the counts differ, and ``cross_table``
shows each command's pair of decisions: the peer remembers the ids of rejected commands too (a resend of a
rejected command is its DUPLICATE; Arbiter decides it afresh, ``commands.decide``), checks duplicates before
existence (a resent ghost command is the peer's DUPLICATE, Arbiter's NOT_FOUND), and calls a create of a
deleted object ALREADY_EXISTS (Arbiter: DELETED).
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from commands import Command, CreateObject, DeleteObject, ObjectState, UpdateObject, decide
from schemas import codec

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
VALID = "VALID"


def peer_lines(path: Path, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Yield the first ``limit`` (all if None) commands of the peer's ``commands.jsonl``."""
    with path.open("rb") as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                return
            yield json.loads(line)


def to_commands(lines: Iterator[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], Command]]:
    """Yield each peer command with its Arbiter command (see the module docstring for the mapping)."""
    owners: dict[str, str] = {}
    for c in lines:
        oid = c["object_id"]
        principal = owners.setdefault(oid, c["principal"])
        common = (c["command_id"], oid, principal, EPOCH + timedelta(milliseconds=c["ts"]), c["expected_version"])
        kind = c["type"]
        cmd: Command
        if kind == "CREATE":
            cmd = CreateObject(*common, document="{}")
        elif kind == "UPDATE":
            cmd = UpdateObject(*common, patch="{}")
        elif kind == "DELETE":
            cmd = DeleteObject(*common)
        else:
            raise ValueError(f"unknown peer command type {kind!r}")
        yield c, cmd


def peer_rule(peer_dir: Path) -> Callable[[Any, dict[str, Any]], tuple[Any, bool, str | None]]:
    """Return ``apply_rule`` of the peer's ``common.py``, loaded from its directory (not copied here)."""
    spec = importlib.util.spec_from_file_location("peer_common", peer_dir / "common.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rule: Callable[[Any, dict[str, Any]], tuple[Any, bool, str | None]] = module.apply_rule
    return rule


def convert(path: Path, peer_dir: Path, limit: int | None = None) -> dict[str, Any]:
    """Return the Arbiter records (key, value) in file order and what both rule sets decide over them.

    ``expected``: Arbiter's counts per reason, from ``decide`` over the converted commands (per object in file
    order, as the topic holds them); ``peer``: the peer's ``reference.py`` counts over the same lines;
    ``cross``: how many commands got each (peer, Arbiter) pair of decisions.
    """
    rule = peer_rule(peer_dir)
    records: list[tuple[bytes, bytes]] = []
    states: dict[str, ObjectState | None] = {}
    peer_states: dict[str, Any] = {}
    expected: Counter[str] = Counter()
    peer: Counter[str] = Counter()
    cross: Counter[tuple[str, str]] = Counter()
    for line, cmd in to_commands(peer_lines(path, limit)):
        records.append((cmd.object_id.encode(), codec.encode_command(cmd)))
        decision = decide(states.get(cmd.object_id), cmd)
        states[cmd.object_id] = decision.state
        ours = VALID if decision.accepted else decision.outcome.reason.value  # type: ignore[union-attr]
        peer_states[line["object_id"]], ok, reason = rule(peer_states.get(line["object_id"]), line)
        theirs = VALID if ok else str(reason)
        expected[ours] += 1
        peer[theirs] += 1
        cross[(theirs, ours)] += 1
    return {"records": records, "expected": dict(sorted(expected.items())), "peer": dict(sorted(peer.items())),
            "cross": {f"{a} -> {b}": n for (a, b), n in sorted(cross.items())}}
