"""The API's view of the newest rules: a request never waits on a catalog read longer than ``REFRESH_WAIT_S``.

With the broker down a read of the catalog blocks for its own timeouts (seconds); the pre-check is advisory, so the
write must go on with the rules seen before and answer on its own terms (503 within ``produce_timeout_s``).
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest

import app.api.rules as rules_module
from app.api.rules import RulesView
from app.rules.catalog import CatalogFold
from app.rules.control import Deploy
from app.settings import Settings

pytestmark = pytest.mark.unit

V1 = Deploy(1, "d1", '{"rules":1,"types":{}}', "ops", datetime(2026, 1, 1, tzinfo=UTC), None)
V2 = Deploy(2, "d2", '{"rules":1,"types":{}}', "ops", datetime(2026, 1, 2, tzinfo=UTC), None)


def test_a_slow_catalog_read_does_not_hold_the_request_and_lands_in_the_background(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate, answer, reads = threading.Event(), [V1], []

    def slow_follow(_settings: Settings, fold: CatalogFold) -> CatalogFold:
        reads.append(1)
        gate.wait(30)  # the broker is down: the read blocks until the test lets it go
        fold.versions = [answer[0]]
        return fold

    monkeypatch.setattr(rules_module, "follow", slow_follow)
    monkeypatch.setattr(rules_module, "REFRESH_WAIT_S", 0.05)

    async def scenario() -> None:
        view = RulesView(Settings())
        assert await view.newest() is None  # the read is still blocked: the request goes on without rules
        assert await view.newest() is None  # ... and a second request does not start a second read
        assert len(reads) == 1
        gate.set()
        for _ in range(200):
            if view.deploy is not None:
                break
            await asyncio.sleep(0.01)
        assert await view.newest() == V1  # the read finished in the background
        view.seen(V2)  # a deploy this API made is newer than any read in flight may bring back
        view.read_at = -rules_module.REFRESH_S
        answer[0] = V1
        assert await view.newest() == V2

    asyncio.run(scenario())
