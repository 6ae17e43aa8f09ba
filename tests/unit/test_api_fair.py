"""Fair shares per principal (issue 25) that need no broker: the token buckets' arithmetic and bounded memory, reads
refused 429 with the draft-11 RateLimit fields while another principal is served, and outcome cache segments."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta

import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.deps import ApiContext
from app.api.identity import dev_token
from app.api.main import create_app
from app.api.quota import TokenBuckets
from app.settings import Settings
from commands import Event, EventType

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_serves_its_burst_then_refuses_with_the_wait_and_refills_at_its_rate() -> None:
    clock = Clock()
    b = TokenBuckets("writes", rate=2.0, burst=4, clock=clock)
    assert [b.take("mallory") for _ in range(4)] == [0.0] * 4
    assert b.take("mallory") == pytest.approx(0.5)  # one token at 2/s
    assert b.take("mallory", 3) == pytest.approx(1.5)  # a cost of 3 waits for three; a refusal takes nothing
    assert b.take("alice") == 0.0  # another principal has its own bucket
    clock.now += 0.5
    assert b.take("mallory") == 0.0 and b.take("mallory") == pytest.approx(0.5)
    clock.now += 0.25  # half a token: refused, and the half is kept for the next try
    assert b.take("mallory") == pytest.approx(0.25) and b.take("mallory") == pytest.approx(0.25)
    clock.now += 100
    assert b.remaining("mallory") == 4  # never above the burst
    assert b.headers("mallory", 0.2) == {"Retry-After": "1", "RateLimit-Policy": '"writes";q=4;w=2',
                                         "RateLimit": '"writes";r=4;t=1'}
    assert TokenBuckets("reads", rate=0, burst=1).take("anyone", 10**9) == 0.0  # rate 0: no limit


def test_idle_principals_buckets_are_dropped_and_the_count_is_capped() -> None:
    """Memory is bounded by the active principals: a refilled (idle) bucket is dropped as others' requests come,
    and beyond max_principals the least recently used goes whatever it holds."""
    clock = Clock()
    b = TokenBuckets("writes", rate=10.0, burst=5, max_principals=1_000, clock=clock)
    for i in range(800):
        b.take(f"p{i}")
    assert len(b) == 800
    clock.now += 1.0  # every bucket has refilled: each is the same as none
    for _ in range(400):
        b.take("alice")
    assert len(b) == 1
    for i in range(5_000):  # all active at once: the cap holds
        b.take(f"q{i}")
    assert len(b) == 1_000
    assert b.take("q4999") == 0.0 and b.remaining("q4999") == 3  # the most recent are the ones kept


class NoObjects:
    """A read model without objects: every read is the 404 of an unknown id (reads are what is tested)."""

    def get(self, object_id: str) -> None:
        return None


def test_a_principal_over_its_read_rate_is_429_with_ratelimit_fields_and_another_is_served() -> None:
    s = Settings(read_rate=1 / 1024, read_burst=3)
    app = create_app(s, read_model=NoObjects())

    def auth(p: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {dev_token(s, p, ttl_s=60)}"}

    client = TestClient(app)
    assert [client.get("/objects/x", headers=auth("mallory")).status_code for _ in range(3)] == [404] * 3
    r = client.get("/objects/x", headers=auth("mallory"))
    assert r.status_code == 429 and r.headers["content-type"].startswith("application/problem+json"), r.text
    body = r.json()
    assert body["code"] == "RATE_LIMITED" and body["violated-policies"] == ["reads"]
    retry = int(r.headers["retry-after"])
    assert 1000 < retry <= 1024  # one token at 1/1024 per second
    assert r.headers["ratelimit-policy"] == '"reads";q=3;w=3072'
    assert r.headers["ratelimit"] == f'"reads";r=0;t={retry}'
    assert client.get("/objects/x", headers=auth("alice")).status_code == 404  # served: its own bucket
    assert 'arbiter_api_rate_limited_total{policy="reads"} 1.0' in app.state.metrics.render().decode()


def test_one_principals_flood_of_outcomes_cannot_evict_anothers() -> None:
    """The cache of create_app: 100 entries, a principal's share 25. Alice's one outcome stays however many
    mallory's commands are decided; mallory keeps her newest 25."""
    cache = create_app(Settings(outcome_cache_size=100, outcome_cache_share=0.25)).state.outcomes

    def decided(cid: str, principal: str) -> Event:
        return Event(f"e-{cid}", EventType.CREATED, f"o-{cid}", 1, cid, principal, T0 + timedelta(seconds=1),
                     principal, document="{}")

    cache.offer(decided("mine", "alice"))
    for i in range(1_000):
        cache.offer(decided(f"flood-{i}", "mallory"))
    kept = cache.lookup("alice", "mine")
    assert kept is not None and kept.kind == "accepted"
    assert len(cache) == 26
    assert cache.lookup("mallory", "flood-999") is not None and cache.lookup("mallory", "flood-974") is None


@pytest.mark.parametrize("fast", [True, False])
def test_an_over_rate_principals_single_writes_are_429_before_their_bodies_are_read(
        fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flood of a principal without write tokens costs a token check and an answer per request: its bodies are
    never read or parsed (fast path and FastAPI routes alike); a batch is still judged by its size."""
    from app.api import json_body

    s = Settings(write_rate=1 / 1024, write_burst=4, api_fast_writes=fast)
    app = create_app(s)
    # no producer: nothing here may need one
    app.state.ctx = ApiContext(s, None, app.state.outcomes, app.state.metrics, app.state.quotas)  # type: ignore[arg-type]
    parsed: list[bytes] = []
    real = json_body.parse_body
    monkeypatch.setattr(json_body, "parse_body", lambda raw: parsed.append(raw) or real(raw))

    def auth(p: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {dev_token(s, p, ttl_s=60)}",
                "Content-Type": "application/json"}

    assert app.state.quotas.writes.take("mallory", 4) == 0.0  # its burst spent
    client = TestClient(app)
    for method, path, body in [("POST", "/objects", b'{"document": {}}'), ("POST", "/objects", b'{"x": NaN'),
                               ("PATCH", "/objects/a", b'{"n": 1}'), ("DELETE", "/objects/a", b"")]:
        r = client.request(method, path, content=body, headers=auth("mallory"))
        assert r.status_code == 429 and r.json()["code"] == "RATE_LIMITED", (method, path, r.text)
        assert r.headers["ratelimit"].startswith('"writes";r=0;')
    assert parsed == []
    batch = b'{"commands": [' + b",".join([b'{"kind": "delete", "object_id": "a"}'] * 5) + b"]}"
    r = client.post("/commands:batch", content=batch, headers=auth("mallory"))
    assert r.status_code == 413 and r.json()["code"] == "BODY_TOO_LARGE", r.text  # over the burst: never servable
    r = client.post("/objects", content=b'{"x": NaN}', headers=auth("alice"))  # another principal: judged as ever
    assert r.status_code == 422 and parsed == [batch, b'{"x": NaN}'], r.text
    assert 'arbiter_api_rate_limited_total{policy="writes"} 4.0' in app.state.metrics.render().decode()


def test_wait_for_tells_the_wait_at_the_limit_and_past_it_and_takes_nothing() -> None:
    """What the early refusal of single writes asks: at exactly the cost a principal is served, one token short it
    waits, and asking never takes a token."""
    clock = Clock()
    b = TokenBuckets("writes", rate=2.0, burst=4, clock=clock)
    assert b.wait_for("new") == 0.0 and b.wait_for("new", 4) == 0.0 and b.wait_for("new", 5) == pytest.approx(0.5)
    assert [b.take("mallory") for _ in range(3)] == [0.0] * 3
    assert b.wait_for("mallory") == 0.0 and b.wait_for("mallory") == 0.0  # one left: at the limit, nothing taken
    assert b.take("mallory") == 0.0  # the last one
    assert b.wait_for("mallory") == pytest.approx(0.5)  # past the limit
    clock.now += 0.5
    assert b.wait_for("mallory") == 0.0 and b.take("mallory") == 0.0
    assert TokenBuckets("writes", rate=0, burst=1).wait_for("anyone", 10**9) == 0.0


class _NoBroker:
    """A producer whose broker is down: every write gets through the quota, then fails to produce (503)."""

    traced = False

    def __init__(self) -> None:
        self.sends = 0

    async def send(self, key: str, value: bytes) -> None:
        from app.errors import BrokerUnavailable

        self.sends += 1
        raise BrokerUnavailable("no broker in this test")


@pytest.mark.parametrize("fast", [True, False])
def test_each_single_write_spends_one_write_token_of_its_principal(fast: bool) -> None:
    """A burst of 2: two single writes get past the quota (and fail to produce: no broker), the third is 429 before
    anything is produced; another principal still has its own burst. The test spends no token itself."""
    s = Settings(write_rate=1 / 1024, write_burst=2, api_fast_writes=fast)
    app = create_app(s)
    producer = _NoBroker()
    app.state.ctx = ApiContext(s, producer, app.state.outcomes, app.state.metrics, app.state.quotas)  # type: ignore[arg-type]
    client = TestClient(app)

    def write(who: str, n: int) -> int:
        return client.post("/objects", json={"id": f"{who}-{n}", "document": {}},
                           headers={"Authorization": f"Bearer {dev_token(s, who, ttl_s=60)}"}).status_code

    assert [write("mallory", n) for n in range(3)] == [503, 503, 429]
    assert producer.sends == 2 and app.state.quotas.writes.remaining("mallory") == 0
    assert write("alice", 0) == 503 and producer.sends == 3
