"""Fair shares per principal against the real broker (issue 25): one principal flooding writes is refused 429 with
the RateLimit fields while another is served, a batch costs one token per command, and one principal cannot take
every waiter slot."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from app.settings import Settings
from tests.integration.test_api_support import api_client, auth, is_problem, produced_commands

pytestmark = pytest.mark.integration


def test_a_principal_flooding_writes_is_429_and_another_is_served(settings: Settings) -> None:
    s = settings.model_copy(update={"write_rate": 1 / 1024, "write_burst": 5})
    with api_client(s) as client:
        mallory = auth(s, "mallory")
        assert [client.post("/objects", json={"document": {"n": i}}, headers=mallory).status_code
                for i in range(5)] == [202] * 5
        r = client.post("/objects", json={"id": "refused", "document": {}}, headers=mallory)
        body = is_problem(r, 429, "RATE_LIMITED")
        assert body["violated-policies"] == ["writes"]
        retry = int(r.headers["retry-after"])
        assert 1000 < retry <= 1024  # one token at 1/1024 per second
        assert r.headers["ratelimit-policy"] == '"writes";q=5;w=5120'
        assert r.headers["ratelimit"] == f'"writes";r=0;t={retry}'
        assert client.delete("/objects/anything", headers=mallory).status_code == 429  # every write route

        alice = auth(s, "alice")
        assert client.post("/objects", json={"id": "served", "document": {}}, headers=alice).status_code == 202
        # alice has 4 tokens: a batch of 5 costs 5 and is refused whole; one over the burst can never be served
        five = {"commands": [{"kind": "create", "document": {"n": i}} for i in range(5)]}
        r = client.post("/commands:batch", json=five, headers=alice)
        is_problem(r, 429, "RATE_LIMITED")
        assert r.headers["ratelimit"].startswith('"writes";r=4;')
        is_problem(client.post("/commands:batch", json={"commands": five["commands"] * 2}, headers=alice), 413,
                   "BODY_TOO_LARGE")
        r = client.post("/commands:batch", json={"commands": five["commands"][:4]}, headers=alice)
        assert r.status_code == 202 and len(r.json()["results"]) == 4
        metrics = client.get("/metrics", headers=auth(s, "operator")).text
    assert 'arbiter_api_rate_limited_total{policy="writes"} 3.0' in metrics
    produced = produced_commands(s, 10)
    assert len(produced) == 10 and "refused" not in {c.object_id for c in produced}  # 5 + 1 + 4: nothing refused


def test_one_principal_cannot_take_every_waiter_slot(settings: Settings) -> None:
    """4 slots, a principal's share 2: of mallory's 4 waiting writes 2 wait and 2 are answered 202 at once
    (produced, not waited on), and alice still gets a slot. Before, mallory's 4 took every slot and alice got
    503 TOO_MANY_WAITERS. No validator runs: a waiter waits its whole wait."""
    s = settings.model_copy(update={"max_waiters": 4, "waiter_share": 0.5})
    with api_client(s) as client:
        outcomes = client.app.state.outcomes  # type: ignore[attr-defined]
        answers: list[Any] = []

        def wait_as_mallory(i: int) -> None:
            answers.append(client.post("/objects", json={"id": f"m-{i}", "document": {}},
                                       headers={**auth(s, "mallory"), "Prefer": "wait=15"}))

        threads = [threading.Thread(target=wait_as_mallory, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 60
            # until two were answered while two wait (fair), or all four wait (one principal took every slot)
            while not (len(answers) == 2 and outcomes.waiting == 2) and outcomes.waiting < 4:
                assert time.monotonic() < deadline, (len(answers), outcomes.waiting)
                time.sleep(0.02)
            assert outcomes.waiting == 2 and [a.status_code for a in answers] == [202, 202]
            r = client.post("/objects", json={"id": "a", "document": {}},
                            headers={**auth(s, "alice"), "Prefer": "wait=0.2"})
            assert r.status_code == 202, r.text  # a slot, its wait timed out: the usual 202 (not 503)
        finally:  # never leave the app while its requests are in flight
            for t in threads:
                t.join(30)
        assert [a.status_code for a in answers] == [202] * 4
        metrics = client.get("/metrics", headers=auth(s, "operator")).text
    assert 'arbiter_api_waits_total{result="over_share"} 2.0' in metrics
    assert 'arbiter_api_waits_total{result="timeout"} 3.0' in metrics
