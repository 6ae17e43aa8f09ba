"""``GET /commands/{id}/explanation``: the gate of ``GET /commands/{id}`` in front of ``arbiter rules explain``.

The explanation itself (archive, fold, ``decide`` with its hook) is held by the integration test of
``arbiter rules explain`` (tests/integration/test_verify.py); here the route's gate, with that function replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.callers.identity import build_verifier, dev_token
from app.api.deps import ApiContext
from app.api.main import create_app
from app.settings import Settings
from commands import CreateObject, Rejection
from tests.unit.rules_support import ORDER, T0, orders, update

pytestmark = pytest.mark.unit


def test_only_the_commands_principal_gets_an_explanation_and_anyone_else_gets_what_an_unknown_id_gets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from commands import decide

    s = Settings(var_dir=tmp_path / "var")
    app = create_app(s)  # without its lifespan: no producer, no audit trail (nothing is written here)
    app.state.ctx = ApiContext(s, None, app.state.outcomes, app.state.metrics, app.state.quotas)  # type: ignore[arg-type]
    app.state.durable_outcomes = type("NoTrail", (), {"decisions": lambda self, principal, command_id: []})()
    client = TestClient(app)
    alice, bob = (dev_token(s, who, ttl_s=60) for who in ("alice", "bob"))
    principal = build_verifier(s).verify(alice).principal
    rules = orders()
    created = decide(None, CreateObject("c1", "o1", principal, T0, document=json.dumps(ORDER), object_type="order"),
                     rules=rules)
    assert created.state is not None
    refused = update(created.state, {"status": "approved"}, rules, principal=principal)
    assert isinstance(refused.outcome, Rejection)
    calls: list[tuple[Any, ...]] = []

    def explained(settings: Settings, command_id: str, *, object_id: str, principal: str) -> list[Any]:
        calls.append((command_id, object_id, principal))
        return [type("E", (), {"as_dict": lambda self: {"rules": ["..."]}})()]

    monkeypatch.setattr("app.verify.explain.explain_command", explained)
    cid = refused.outcome.command_id
    assert cid is not None
    unknown = client.get(f"/commands/{cid}/explanation", headers={"Authorization": f"Bearer {bob}"})
    app.state.ctx.outcomes.offer(refused.outcome)
    mine = client.get(f"/commands/{cid}/explanation", headers={"Authorization": f"Bearer {alice}"})
    assert mine.status_code == 200, mine.text
    assert mine.json() == {"command_id": cid, "object_id": "o1", "explanations": [{"rules": ["..."]}]}
    assert calls == [(cid, "o1", principal)]
    other = client.get(f"/commands/{cid}/explanation", headers={"Authorization": f"Bearer {bob}"})
    assert other.status_code == unknown.status_code == 404
    assert other.json() == unknown.json() and other.headers.get("content-length") == unknown.headers.get(
        "content-length")
    assert len(calls) == 1  # nothing was read for bob
