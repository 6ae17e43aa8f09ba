"""``GET /objects/{id}/events?include=rejections`` shows a rule's rejection with its rule, message, pointers and rules
version (issue 36, "What every decision says"): the audit projection and the RocksDB read model on disk, the app
through httpx's ASGI transport (no broker)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from app.api.callers.identity import dev_token
from app.api.main import create_app
from app.read_models import audit_root, read_model_root
from app.settings import Settings
from commands import Event, Rejection, UpdateObject, decide
from projections.audit import AuditProjection
from projections.audit.outcomes import AuditOutcomes
from projections.db import DbProjection, ReadModel
from projections.db.store import ReadModelStore
from projections.runner import Item, Record
from schemas import codec
from tests.unit.rules_support import T0, create_order, orders

pytestmark = pytest.mark.unit


def test_a_rule_rejection_is_shown_with_its_rule_message_pointers_and_version(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    rules = orders(version=3)
    made = create_order(rules)
    outcomes: list[Event | Rejection] = [made.outcome]
    for n, patch in enumerate(({"priority": 9}, {"status": "approved"}), start=1):
        outcomes.append(decide(made.state, UpdateObject(f"u{n}", "o1", "alice", T0 + timedelta(seconds=n),
                                                        patch=json.dumps(patch)), rules=rules).outcome)
    assert all(isinstance(o, Rejection) for o in outcomes[1:])
    offsets = {s.topic_events: 0, s.topic_rejections: 0}
    items = []
    for o in outcomes:
        topic = s.topic_events if isinstance(o, Event) else s.topic_rejections
        items.append(Item(Record(topic, 0, offsets[topic], b"o1", codec.encode_outcome(o), 0), o))
        offsets[topic] += 1
    audit = AuditProjection(audit_root(s))
    audit.apply(items)
    audit.close()
    db = DbProjection(ReadModelStore.open_current(read_model_root(s)))
    db.apply([it for it in items if isinstance(it.outcome, Event)])
    db.close()
    app = create_app(s, read_model=ReadModel(read_model_root(s), refresh_s=0))
    app.state.durable_outcomes = AuditOutcomes(audit_root(s))

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.get("/objects/o1/events?include=rejections",
                                    headers={"Authorization": f"Bearer {dev_token(s, 'alice', ttl_s=60)}"})
    body = asyncio.run(get()).json()
    app.state.durable_outcomes.close()
    shown = {r["command_id"]: r for r in body["rejections"]}
    for o in outcomes[1:]:
        assert isinstance(o, Rejection) and o.rule is not None
        r = shown[o.command_id]
        assert (r["reason"], r["rule"], r["rule_message"], r["rule_pointers"], r["rules_version"]) == (
            "RULE_VIOLATED", o.rule, o.rule_message, list(o.rule_pointers), 3), r
    assert {r["rule"] for r in shown.values()} == {"order:patch_schema", "order:status-flow"}
