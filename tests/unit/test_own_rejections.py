"""``GET /objects/{id}/events?include=rejections`` reads only the caller's own rejections (an index by principal and
object), at most ``OWN_REJECTIONS_PER_PAGE`` of them, off the event loop (issue 35, item 5): the audit projection and
its reader over rocksdict on disk, the RocksDB read model, the app through httpx's ASGI transport (no broker)."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from app.api.identity import dev_token
from app.api.main import create_app
from app.read_models import audit_root, read_model_root
from app.settings import Settings
from commands import CreateObject, Event, GrantReader, Rejection, UpdateObject, decide
from commands.command import Command
from projections.audit import AuditProjection
from projections.audit.chain import REJECTION_INDEX_MARK
from projections.audit.outcomes import AuditOutcomes, OwnRejections
from projections.audit.store import open_primary
from projections.db import DbProjection, ReadModel
from projections.db.store import ReadModelStore
from projections.runner import Item, Record
from schemas import codec

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _decided(commands: list[Command]) -> list[Event | Rejection]:
    state, out = None, []
    for c in commands:
        d = decide(state, c)
        state = d.state if d.accepted else state
        out.append(d.outcome)
    return out


def _setup(s: Settings, others: int, own: int) -> None:
    """'doc' by alice, mallory made its reader; ``others`` updates by mallory (FORBIDDEN) and ``own`` stale updates by
    alice (VERSION_CONFLICT), audited as the projection appends them; the events in the read model."""
    at = [T0 + timedelta(milliseconds=n) for n in range(2 + others + own)]
    commands: list[Command] = [CreateObject("c", "doc", "alice", at[0], document="{}"),
                               GrantReader("g", "doc", "alice", at[1], reader="mallory")]
    commands += [UpdateObject(f"m{n}", "doc", "mallory", at[2 + n], patch="{}") for n in range(others)]
    commands += [UpdateObject(f"a{n}", "doc", "alice", at[2 + others + n], expected_version=1, patch="{}")
                 for n in range(own)]
    items = []
    for n, o in enumerate(_decided(commands)):
        topic = s.topic_events if isinstance(o, Event) else s.topic_rejections
        items.append(Item(Record(topic, 0, n, b"doc", codec.encode_outcome(o), 0), o))
    audit = AuditProjection(audit_root(s))
    audit.apply(items)
    audit.close()
    db = DbProjection(ReadModelStore.open_current(read_model_root(s)))
    db.apply([it for it in items if isinstance(it.outcome, Event)])
    db.close()


class _Recording(AuditOutcomes):
    """The real reader, noting whether it was called with an event loop running in its thread."""

    on_loop: list[bool]

    def rejections(self, *args, **kwargs) -> OwnRejections:  # noqa: ANN002, ANN003
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)
        return super().rejections(*args, **kwargs)


def _app(s: Settings, outcomes: AuditOutcomes):  # noqa: ANN202
    app = create_app(s, read_model=ReadModel(read_model_root(s), refresh_s=0))
    app.state.durable_outcomes = outcomes
    return app


def _get(app, path: str, who: str, s: Settings) -> httpx.Response:  # noqa: ANN001
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.get(path, headers={"Authorization": f"Bearer {dev_token(s, who, ttl_s=60)}"})
    return asyncio.run(go())


def test_only_the_callers_own_rejections_are_read_and_off_the_event_loop(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    _setup(s, others=300, own=3)
    outcomes = _Recording(audit_root(s))
    outcomes.on_loop = []
    app = _app(s, outcomes)
    body = _get(app, "/objects/doc/events?include=rejections", "alice", s).json()
    assert [r["command_id"] for r in body["rejections"]] == ["a0", "a1", "a2"]
    assert {r["reason"] for r in body["rejections"]} == {"VERSION_CONFLICT"} and body["rejections_truncated"] is False
    assert outcomes.scanned == 3, "another principal's rejections were read"
    assert outcomes.on_loop == [False], "the audit store was read on the event loop"
    body = _get(app, "/objects/doc/events?include=rejections", "mallory", s).json()
    assert len(body["rejections"]) == 300 and {r["reason"] for r in body["rejections"]} == {"FORBIDDEN"}
    outcomes.close()


@pytest.mark.parametrize(("own", "truncated"), [(3, False), (4, True)])
def test_a_page_reads_at_most_its_cap_of_own_rejections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        own: int, truncated: bool) -> None:
    s = Settings(var_dir=tmp_path / "var")
    _setup(s, others=5, own=own)
    monkeypatch.setattr("app.api.routes.objects.OWN_REJECTIONS_PER_PAGE", 3)
    outcomes = AuditOutcomes(audit_root(s))
    body = _get(_app(s, outcomes), "/objects/doc/events?include=rejections", "alice", s).json()
    assert [r["command_id"] for r in body["rejections"]] == ["a0", "a1", "a2"]
    assert body["rejections_truncated"] is truncated and outcomes.scanned == 3
    outcomes.close()


def test_a_store_written_before_the_index_is_indexed_once_when_the_projection_opens(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    _setup(s, others=2, own=2)
    db = open_primary(audit_root(s))  # as an earlier release left it: no rejection index, no mark
    for k in [k for k, _ in db.items() if k[:1] == b"j" or k == REJECTION_INDEX_MARK]:
        del db[k]
    db.close()
    outcomes = AuditOutcomes(audit_root(s))
    assert outcomes.rejections("doc", "alice", limit=10) == OwnRejections([], False)
    outcomes.close()
    again = AuditProjection(audit_root(s))
    assert again.backfilled == 4
    again.close()
    assert AuditProjection(audit_root(s)).backfilled == 0  # marked: not again
    outcomes = AuditOutcomes(audit_root(s))
    assert [r.command_id for r in outcomes.rejections("doc", "alice", limit=10).rejections] == ["a0", "a1"]
    outcomes.close()


def test_an_open_route_is_served_while_a_big_scan_runs(tmp_path: Path) -> None:
    """The scan blocks until released; the open route must be answered meanwhile. A scan on the event loop would
    block the loop (and the open route with it) until the safety valve releases it: the order would be reversed."""
    s = Settings(var_dir=tmp_path / "var")
    _setup(s, others=0, own=1)
    entered, release, order = threading.Event(), threading.Event(), []

    class Blocking(AuditOutcomes):
        def rejections(self, *args, **kwargs) -> OwnRejections:  # noqa: ANN002, ANN003
            entered.set()
            release.wait(30)  # the valve: a scan on the loop is released here, late
            order.append("scan released" if release.is_set() else "scan timed out")
            return super().rejections(*args, **kwargs)

    outcomes = Blocking(audit_root(s))
    app = _app(s, outcomes)

    async def go() -> None:
        headers = {"Authorization": f"Bearer {dev_token(s, 'alice', ttl_s=60)}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            scan = asyncio.create_task(client.get("/objects/doc/events?include=rejections", headers=headers))
            while not entered.is_set():  # until the scan is under way (on the loop, this loop is stuck in it)
                await asyncio.sleep(0.001)
            r = await client.get("/registry/subjects")
            assert r.status_code == 200
            order.append("open route answered")
            release.set()
            assert (await scan).status_code == 200

    asyncio.run(go())
    outcomes.close()
    assert order == ["open route answered", "scan released"]
