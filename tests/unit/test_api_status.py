"""/status.json: operators only, and computed at most once per second however many clients poll at once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest

from app.api.callers.auth import OPERATE
from app.api.callers.identity import dev_token
from app.api.main import create_app
from app.api.writes.memo import Memo
from app.settings import Settings

pytestmark = pytest.mark.unit

SETTINGS = Settings()


class SlowCollector:
    """Counts snapshots; each takes a while, as a real one (broker metadata, watermarks) does."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            n = self.calls
        time.sleep(0.05)
        return {"snapshot": n}

    def close(self) -> None:
        pass


def bearer(principal: str) -> dict[str, str]:
    scopes = (OPERATE,) if principal == "ops" else None
    return {"Authorization": f"Bearer {dev_token(SETTINGS, principal, scopes, ttl_s=60)}"}


async def _get_many(app: Any, n: int, headers: dict[str, str]) -> list[httpx.Response]:  # noqa: ANN401
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        return await asyncio.gather(*[client.get("/status.json", headers=headers) for _ in range(n)])


def test_many_concurrent_polls_compute_the_figures_once() -> None:
    app = create_app(SETTINGS)
    collector = app.state.status = SlowCollector()
    # The memo's clock is the test's: 300 requests pass authentication one after another on one event loop before
    # they reach the memo, which took over a second on a loaded machine, so the last ones found the figures a
    # second old and computed them again (correctly). What is tested is that concurrent polls share one run.
    now = [0.0]
    app.state.status_memo._clock = lambda: now[0]

    async def two_bursts() -> tuple[list[httpx.Response], int, list[httpx.Response]]:
        first = await _get_many(app, 300, bearer("ops"))
        calls = collector.calls
        now[0] = 1.0  # a second later the next burst computes once more
        return first, calls, await _get_many(app, 300, bearer("ops"))

    responses, calls, again = asyncio.run(two_bursts())
    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1  # one computation's bytes, beside the read model's history size
    assert responses[0].json()["snapshot"] == 1
    assert calls == 1, f"{calls} computations for 300 concurrent requests"
    assert responses[0].headers["cache-control"] == "no-store"
    assert {r.json()["snapshot"] for r in again} == {2} and collector.calls == 2


def test_status_json_needs_an_operator() -> None:
    app = create_app(SETTINGS)
    app.state.status = SlowCollector()
    nobody, bad, alice = (asyncio.run(_get_many(app, 1, h))[0]
                          for h in ({}, {"Authorization": "Bearer forged.token"}, bearer("alice")))
    for r in (nobody, bad):
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert r.headers["content-type"] == "application/problem+json" and r.json()["code"] == "UNAUTHORIZED"
    assert alice.status_code == 403 and alice.json()["code"] == "INSUFFICIENT_SCOPE"
    assert app.state.status.calls == 0


def test_memo_recomputes_after_its_interval_only() -> None:
    now = [0.0]
    runs: list[int] = []
    memo = Memo(lambda: runs.append(1) or len(runs), interval=1.0, clock=lambda: now[0])

    async def scenario() -> list[int]:
        got = [await memo.get(), await memo.get()]
        now[0] = 0.99
        got.append(await memo.get())
        now[0] = 1.0
        got.append(await memo.get())
        return got

    assert asyncio.run(scenario()) == [1, 1, 1, 2]


def test_callers_waiting_for_a_run_longer_than_the_interval_take_its_result() -> None:
    # a snapshot slower than the interval (a broker slow to answer): the callers queued behind it must not run it
    # again one after another, each finding the previous result already a second old
    now = [0.0]
    runs: list[int] = []

    def slow() -> int:
        now[0] += 1.5
        runs.append(1)
        return len(runs)

    memo = Memo(slow, interval=1.0, clock=lambda: now[0])

    async def bursts() -> list[list[int]]:
        return [list(await asyncio.gather(*[memo.get() for _ in range(20)])) for _ in range(2)]

    # the second burst finds the first's result stale: one more run, shared again
    assert asyncio.run(bursts()) == [[1] * 20, [2] * 20] and memo.runs == 2
