"""Shared helpers of the rules tests: the order example, commands and a decide loop."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from commands import CreateObject, Decision, ObjectState, UpdateObject, decide
from commands.rules import RuleSet, compile_rules

ORDERS = Path(__file__).resolve().parents[2] / "docs" / "examples" / "rules" / "orders.yaml"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ORDER = {"title": "six chairs", "priority": 3, "customer": "acme", "amount": 20000, "status": "draft"}


def orders(version: int = 1) -> RuleSet:
    """Return the order example compiled as ``version``."""
    return compile_rules(ORDERS.read_text("utf-8"), version=version)


def with_rules(document: dict[str, Any], version: int = 1) -> RuleSet:
    """Return a rules document given as a dict, compiled."""
    return compile_rules(json.dumps(document), version=version)


def create_order(rules: RuleSet, **changes: Any) -> Decision:  # noqa: ANN401
    """Return the decision on creating order o1 (by alice) with ``changes`` to the example document."""
    doc = {k: v for k, v in {**ORDER, **changes}.items() if v is not None}
    return decide(None, CreateObject("c-create", "o1", "alice", T0, document=json.dumps(doc), object_type="order"),
                  rules=rules)


_counter = iter(range(1, 10**9))


def update(state: ObjectState, patch: dict[str, Any], rules: RuleSet | None, *, principal: str = "alice",
           groups: tuple[str, ...] = ()) -> Decision:
    """Return the decision on a merge patch of ``state``'s object, with a fresh command id."""
    n = next(_counter)
    return decide(state, UpdateObject(f"u{n}", "o1", principal, T0 + timedelta(seconds=n), patch=json.dumps(patch),
                                      groups=groups), rules=rules)
