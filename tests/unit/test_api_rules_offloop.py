"""The API's rules work never holds its event loop: the pre-check runs in a thread and gives up at its deadline, a new
rules version compiles in the background (writes meanwhile are not pre-checked), and ``POST /commands:batch``
pre-checks typed updates as ``PATCH /objects/{id}`` does (issue 47)."""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api import rules as api_rules
from app.api.callers.identity import dev_token
from app.api.deps import ApiContext
from app.api.main import create_app
from app.api.rules import RulesView, precheck
from app.api.writes.producer import Delivered
from app.rules.control import Deploy
from app.settings import Settings
from commands import CreateObject, Event, ReasonCode, Rejection, decide
from tests.unit.rules_support import ORDER, T0, orders

pytestmark = pytest.mark.unit

RULES = orders(version=4)
BAD = CreateObject("c1", "o1", "alice", T0, document=json.dumps({**ORDER, "priority": 9}), object_type="order")
SAFETY_S = 30  # only if the code under test blocks the loop: then the test fails instead of hanging


def view(latest: Callable[[str], Event | None] | None = None) -> RulesView:
    v = RulesView(Settings(), latest=latest)
    v.seen(Deploy(RULES.version, RULES.digest, RULES.document, "ops", T0))
    return v


class Blocked:
    """Wraps ``real``: records the thread of each call and, off the calling test's loop thread, waits for ``go``."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real, self.threads = real, []  # type: list[int]
        self.started, self.go = threading.Event(), threading.Event()
        self.loop_thread = threading.get_ident()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        self.threads.append(threading.get_ident())
        self.started.set()
        self.go.wait(SAFETY_S if threading.get_ident() != self.loop_thread else 0)
        return self.real(*args, **kwargs)


def test_the_precheck_runs_off_the_loop_which_answers_others_meanwhile_and_gives_up_at_its_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    v = view()
    asyncio.run(v.compiled_newest())
    slow = Blocked(decide)
    monkeypatch.setattr(api_rules, "decide", slow)

    async def scenario() -> tuple[Rejection | None, str]:
        check = asyncio.create_task(precheck(v, BAD))
        await asyncio.to_thread(slow.started.wait, SAFETY_S)  # the pre-check is inside decide now
        other = await asyncio.create_task(asyncio.sleep(0, "answered"))  # another request's turn on the loop
        monkeypatch.setattr(api_rules, "PRECHECK_DEADLINE_S", 0.0)  # not read again: the check's deadline is set
        early = await check  # decide is still blocked: past the real deadline, the check is given up
        return early, other

    monkeypatch.setattr(api_rules, "PRECHECK_DEADLINE_S", 0.05)
    try:
        early, other = asyncio.run(scenario())
    finally:
        slow.go.set()
    assert other == "answered"
    assert slow.threads and slow.loop_thread not in slow.threads  # decide ran in a pre-check thread
    assert early is None  # advisory: the write goes on unchecked, the validator decides


def test_a_new_version_compiles_in_the_background_and_writes_meanwhile_are_not_prechecked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from app.validator.rules import compiled

    slow = Blocked(compiled)
    monkeypatch.setattr(api_rules, "compiled", slow)
    v = view()
    try:
        during = asyncio.run(precheck(v, BAD))
        assert slow.started.wait(SAFETY_S)  # the compile has begun (and waits for go, unless on the loop's thread)
        assert during is None  # compiling: skipped, not answered under a superseded version
    finally:
        slow.go.set()
    assert slow.threads and slow.loop_thread not in slow.threads  # compiled in the background
    asyncio.run(v.compiled_newest())
    after = asyncio.run(precheck(v, BAD))
    assert after is not None and after.reason is ReasonCode.RULE_VIOLATED and after.rules_version == 4


class _Producer:
    traced = False

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []

    async def send_many(self, records: Sequence[tuple[str, bytes]]) -> list[Delivered]:
        self.records += records
        return [Delivered(0, n) for n in range(len(records))]


def test_the_batch_route_prechecks_typed_updates_like_patch_does() -> None:
    made = decide(None, CreateObject("c0", "o1", "alice", T0, document=json.dumps(ORDER), object_type="order"),
                  rules=RULES).outcome
    assert isinstance(made, Event)
    s = Settings()
    app = create_app(s)
    producer = _Producer()
    rules = view(lambda object_id: made if object_id == "o1" else None)
    asyncio.run(rules.compiled_newest())
    app.state.ctx = ApiContext(s, producer, app.state.outcomes, app.state.metrics, app.state.quotas,  # type: ignore[arg-type]
                               rules=rules)
    r = TestClient(app).post("/commands:batch", json={"commands": [
        {"kind": "update", "object_id": "o1", "patch": {"priority": 9}},
        {"kind": "update", "object_id": "o1", "patch": {"priority": 2}}]},
        headers={"Authorization": f"Bearer {dev_token(s, 'alice', ttl_s=60)}"})
    assert r.status_code == 422, r.text
    first, second = r.json()["results"]
    assert (first["status"], first["code"], first["rule"], first["rules_version"]) == \
        (422, "RULE_VIOLATED", "order:patch_schema", 4)
    assert second["status"] == 202
    assert len(producer.records) == 1  # the refused update was not produced
