"""The Python client's protocol logic against scripted answers (httpx.MockTransport): retries with the same
Idempotency-Key, Retry-After, following Location, the If-Match loop, read-your-writes, pages, the feed's resume."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from arbiter_client import (
    Accepted,
    AsyncClient,
    BrokerUnavailable,
    ChangesExpired,
    Client,
    RetryPolicy,
    RuleViolated,
    TransportFailed,
    Unavailable,
    VersionConflict,
)
from arbiter_client.errors import error_from
from arbiter_client.feed import FeedCursor, SseParser
from arbiter_client.merge_patch import apply, diff
from arbiter_client.plans import Plan, Protocol, T, run_sync
from arbiter_client.retry import parse_retry_after

pytestmark = pytest.mark.unit

BASE = "http://arbiter.test"


def problem(status: int, code: str, headers: dict[str, str] | None = None, **extra: Any) -> httpx.Response:  # noqa: ANN401
    body = {"type": f"urn:arbiter:problem:{code.lower()}", "title": code, "status": status, "detail": code,
            "code": code, **extra}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json", **(headers or {})})


def decided(status: int, version: int, object_id: str = "o", position: str | None = None) -> httpx.Response:
    headers = {"ETag": f'"{version}"'} | ({"Arbiter-Position": position} if position else {})
    if status == 204:
        return httpx.Response(204, headers=headers)
    return httpx.Response(status, headers=headers, json={"command_id": "k", "object_id": object_id,
                                                          "status": "accepted", "version": version, "event": "X"})


class Script:
    """Answers requests in order from a list of responses or exceptions (or a function of the request)."""

    def __init__(self, *answers: httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


def run(script: Script, plan_of: Callable[[Protocol], Plan[T]], **kw: Any) -> tuple[T, list[float]]:  # noqa: ANN401
    protocol = Protocol(BASE, "tok", retry=RetryPolicy(rng=random.Random(7), **kw))
    sleeps: list[float] = []
    with httpx.Client(transport=httpx.MockTransport(script)) as http:
        return run_sync(plan_of(protocol), http.send, sleeps.append), sleeps


def test_a_write_is_retried_on_503_429_and_timeouts_with_the_same_idempotency_key() -> None:
    script = Script(problem(503, "BROKER_UNAVAILABLE", {"Retry-After": "1"}),
                    httpx.ReadTimeout("slow"),
                    problem(429, "RATE_LIMITED", {"Retry-After": "2"}),
                    decided(201, 1, position="events:2:9"))
    outcome, sleeps = run(script, lambda p: p.create({"a": 1}, "o"))
    assert outcome == Accepted("k", "o", 1, "X", "events:2:9")
    keys = {r.headers["idempotency-key"] for r in script.requests}
    assert len(script.requests) == 4 and len(keys) == 1
    assert [r.headers["prefer"] for r in script.requests] == ["wait=10"] * 4
    assert json.loads(script.requests[0].content) == {"id": "o", "document": {"a": 1}}
    # Retry-After honoured (plus at most 20 % jitter); the timeout backs off without it
    assert 1.0 <= sleeps[0] <= 1.2 and 0 <= sleeps[1] <= 0.4 and 2.0 <= sleeps[2] <= 2.4


def test_retries_stop_at_the_policy_and_raise_the_typed_error() -> None:
    script = Script(*[problem(503, "BROKER_UNAVAILABLE", {"Retry-After": "0"}) for _ in range(3)])
    with pytest.raises(BrokerUnavailable) as e:
        run(script, lambda p: p.update("o", {"a": 2}), attempts=3)
    assert len(script.requests) == 3 and e.value.retryable and e.value.status == 503
    script = Script(*[httpx.ConnectError("refused") for _ in range(2)])
    with pytest.raises(TransportFailed):
        run(script, lambda p: p.delete("o"), attempts=2)
    assert len(script.requests) == 2


def test_a_retry_after_beyond_the_policy_is_raised_at_once() -> None:
    script = Script(problem(503, "VIEW_STALE", {"Retry-After": "3600"}))
    with pytest.raises(Unavailable) as e:
        run(script, lambda p: p.get("o"))
    assert e.value.code == "VIEW_STALE" and len(script.requests) == 1


def test_retry_after_forms_and_backoff_bounds() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    policy = RetryPolicy(attempts=5, base_s=0.5, max_backoff_s=2.0, rng=random.Random(1))
    assert all(0 <= policy.delay(n, None) <= min(2.0, 0.5 * 2 ** (n - 1)) for n in range(1, 5))  # type: ignore[operator]
    assert policy.delay(5, None) is None and policy.delay(1, 61.0) is None


def test_a_202_is_followed_at_its_location_until_decided() -> None:
    queued = httpx.Response(202, headers={"Location": "/commands/k"},
                            json={"command_id": "k", "object_id": "o", "status": "queued", "partition": 0, "offset": 4})
    script = Script(queued, problem(404, "NOT_FOUND"), problem(404, "NOT_FOUND"),
                    httpx.Response(200, json={"command_id": "k", "object_id": "o", "status": "accepted", "version": 3,
                                              "event": "UPDATED", "reason": None, "message": None}))
    outcome, _ = run(script, lambda p: p.update("o", {"x": 1}))
    assert outcome == Accepted("k", "o", 3, "UPDATED", None)
    assert [r.url.path for r in script.requests] == ["/objects/o"] + ["/commands/k"] * 3


def test_a_followed_rejection_raises_its_typed_error() -> None:
    queued = httpx.Response(202, headers={"Location": "/commands/k"},
                            json={"command_id": "k", "object_id": "o", "status": "queued", "partition": 0, "offset": 4})
    rejected = httpx.Response(200, json={"command_id": "k", "object_id": "o", "status": "rejected", "version": 5,
                                         "event": None, "reason": "VERSION_CONFLICT", "message": "at 5"})
    with pytest.raises(VersionConflict) as e:
        run(Script(queued, rejected), lambda p: p.update("o", {"x": 1}, if_match=4))
    assert e.value.current_version == 5


def test_update_with_retry_reads_again_after_a_conflict_and_writes_the_difference() -> None:
    doc = {1: {"n": 1, "tags": ["a"], "gone": True}, 2: {"n": 5, "tags": ["a"], "gone": True}}
    script = Script(httpx.Response(200, json=doc[1], headers={"ETag": '"1"'}),
                    problem(412, "VERSION_CONFLICT", {"ETag": '"2"'}, current_version=2),
                    httpx.Response(200, json=doc[1], headers={"ETag": '"1"'}),  # the read model still lags
                    httpx.Response(200, json=doc[2], headers={"ETag": '"2"'}),
                    decided(200, 3))

    def bump(d: dict[str, Any]) -> dict[str, Any]:
        d["n"] += 1
        d.pop("gone")
        return d

    outcome, _ = run(script, lambda p: p.update_with_retry("o", bump))
    assert outcome.version == 3
    patches = [(r.headers["if-match"], json.loads(r.content)) for r in script.requests if r.method == "PATCH"]
    assert patches == [('"1"', {"n": 2, "gone": None}), ('"2"', {"n": 6, "gone": None})]
    assert all(r.headers["content-type"] == "application/merge-patch+json" for r in script.requests
               if r.method == "PATCH")


def test_reads_carry_the_positions_of_this_clients_writes() -> None:
    script = Script(decided(200, 2, position="events:3:17"), decided(200, 1, "p", position="events:1:4"),
                    decided(200, 3, position="events:3:20"), httpx.Response(200, json={}, headers={"ETag": '"3"'}))
    protocol = Protocol(BASE, "tok")
    with httpx.Client(transport=httpx.MockTransport(script)) as http:
        for plan in (protocol.update("o", {"a": 1}), protocol.update("p", {"a": 1}), protocol.update("o", {"a": 2}),
                     protocol.get("o")):
            run_sync(plan, http.send)  # type: ignore[arg-type]
    assert script.requests[-1].headers["arbiter-min-position"] == "events:1:4, events:3:20"
    assert "arbiter-min-position" not in script.requests[0].headers


def test_lists_and_history_are_paged_by_cursor() -> None:
    def page(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        n = 0 if cursor is None else int(cursor)
        items = [{"id": f"o{n + i}", "version": 1, "updated_at": "t", "new_field": 1} for i in range(2)]
        return httpx.Response(200, json={"items": items, "next_cursor": str(n + 2) if n < 4 else None})

    with Client(BASE, "tok", transport=httpx.MockTransport(Script(page, page, page))) as client:
        assert [o.id for o in client.objects(page_size=2)] == [f"o{i}" for i in range(6)]

    def events(request: httpx.Request) -> httpx.Response:
        after = int(request.url.params["after_version"])
        evs = [{"type": "UPDATED", "version": after + 1, "principal": "a", "at": "t", "command_id": "c"}]
        return httpx.Response(200, json={"object_id": "o", "events": evs, "next_after_version": after + 1 if after < 2
                                         else None})

    with Client(BASE, "tok", transport=httpx.MockTransport(Script(events, events, events))) as client:
        assert [e.version for e in client.history("o", page_size=1)] == [1, 2, 3]


def _frames(*frames: str, fail: bool = False) -> Iterator[bytes]:
    for f in frames:
        yield f.encode()
    if fail:
        raise httpx.ReadError("connection reset")


def test_the_change_feed_resumes_by_last_event_id_after_a_drop_and_a_reset() -> None:
    change = 'id: c1.{n}\nevent: change\ndata: {{"object_id":"o","type":"UPDATED","version":{n}}}\n\n'
    script = Script(
        lambda r: httpx.Response(200, stream=_Stream(
            _frames(": live\n\n", change.format(n=1), change.format(n=2), fail=True))),
        lambda r: httpx.Response(200, stream=_Stream(_frames(
            change.format(n=3), 'event: reset\ndata: {"code":"SLOW_CONSUMER","detail":"x","resume_from":"c1.3"}\n\n'))),
        lambda r: httpx.Response(200, stream=_Stream(_frames(change.format(n=4)[:-1] + "\n", change.format(n=5).replace(
            "UPDATED", "DELETED")))))
    with Client(BASE, "tok", transport=httpx.MockTransport(script), retry=RetryPolicy(base_s=0.001)) as client:
        got = [(c.id, c.version, c.type) for c in client.changes("o")]
    assert got == [("c1.1", 1, "UPDATED"), ("c1.2", 2, "UPDATED"), ("c1.3", 3, "UPDATED"), ("c1.4", 4, "UPDATED"),
                   ("c1.5", 5, "DELETED")]
    assert [r.headers.get("last-event-id") for r in script.requests] == [None, "c1.2", "c1.3"]
    assert all(r.url.path == "/objects/o/changes" for r in script.requests)


class _Stream(httpx.SyncByteStream):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks


def test_sse_parsing_follows_the_whatwg_rules_we_rely_on() -> None:
    parser, cursor = SseParser(), FeedCursor(None, None)
    lines = [": keepalive", "", "id: a", "event: change", 'data: {"object_id":', 'data: "x"}', "", "retry: 5", "",
             "event: access-revoked", 'data: {"object_id":"x","version":3}', ""]
    msgs = [m for m in (parser.line(line) for line in lines) if m is not None]
    assert msgs == [("change", '{"object_id":\n"x"}', "a"), ("access-revoked", '{"object_id":"x","version":3}', None)]
    changes = [cursor.take(*m) for m in msgs]
    assert [c.kind for c in changes if c] == ["change", "access-revoked"] and cursor.last_event_id == "a"


def test_errors_are_typed_by_their_problem_code_and_a_rule_is_read() -> None:
    # the members app.api's problem of a rule's rejection carries (tests/unit/test_api_rules.py renders one)
    e = error_from(422, {}, {"code": "RULE_VIOLATED", "detail": "d", "rule": "order:status", "rules_version": 2,
                             "rule_message": "draft cannot go to done", "rule_pointers": ["/status"]})
    assert isinstance(e, RuleViolated) and (e.rule, e.message, e.pointers, e.rules_version) == (
        "order:status", "draft cannot go to done", ["/status"], 2)
    e = error_from(422, {}, {"code": "RULE_ERROR", "detail": "d", "rule": "order:limit"})
    assert isinstance(e, RuleViolated) and e.code == "RULE_ERROR" and (e.rule, e.message, e.pointers) == (
        "order:limit", "d", [])
    e = error_from(503, {"Retry-After": "3"}, {"code": "BROKER_UNAVAILABLE", "detail": "x"})
    assert isinstance(e, BrokerUnavailable) and e.retry_after == "3"
    assert type(error_from(502, {}, None)).__name__ == "ArbiterError"


def test_merge_patch_difference_round_trips_and_refuses_nulls() -> None:
    old = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, None], "f": "x"}
    new = {"a": 1, "b": {"c": 4}, "e": [1, None], "g": {"h": True}}
    patch = diff(old, new)
    assert patch == {"b": {"c": 4, "d": None}, "f": None, "g": {"h": True}}
    assert apply(old, patch) == new
    with pytest.raises(ValueError, match="null"):
        diff(old, {"a": None})
    with pytest.raises(ValueError, match="null"):
        diff(old, {"z": {"y": None}})


class _AsyncStream(httpx.AsyncByteStream):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def test_the_async_feed_resumes_too_and_a_503_waits_its_retry_after() -> None:
    change = 'id: c1.{n}\nevent: change\ndata: {{"object_id":"o{n}","type":"CREATED","version":1}}\n\n'
    script = Script(
        lambda r: httpx.Response(200, stream=_AsyncStream(_frames(change.format(n=1), fail=True))),
        problem(503, "TOO_MANY_SUBSCRIBERS", {"Retry-After": "0"}),
        lambda r: httpx.Response(200, stream=_AsyncStream(_frames(change.format(n=2)))),
        lambda r: httpx.Response(200, stream=_AsyncStream(_frames(
            'event: reset\ndata: {"code":"CHANGES_EXPIRED","detail":"gone","resume_from":"c1.2"}\n\n'))))
    retried: list[str] = []

    async def read() -> list[str]:
        async with AsyncClient(BASE, "tok", transport=httpx.MockTransport(script), retry=RetryPolicy(base_s=0.001),
                               on_retry=lambda e, _: retried.append(e.code)) as client:
            got: list[str] = []
            with pytest.raises(ChangesExpired):
                async for c in client.changes():
                    got.append(c.object_id)
            return got

    assert asyncio.run(read()) == ["o1", "o2"]
    assert [r.headers.get("last-event-id") for r in script.requests] == [None, "c1.1", "c1.1", "c1.2"]
    assert retried == ["TRANSPORT_FAILED", "TOO_MANY_SUBSCRIBERS", "TRANSPORT_FAILED"]


class _Sleeps:
    """The clients' sleep, faked: records what the feed waits instead of waiting it (no wall time in the test)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.seconds.append(seconds)


def _feed_script(stream: type[httpx.SyncByteStream] | type[httpx.AsyncByteStream]) -> Script:
    change = 'id: c1.{n}\nevent: change\ndata: {{"object_id":"o","type":"{t}","version":{n}}}\n\n'
    return Script(
        problem(429, "RATE_LIMITED", {"Retry-After": "5"}),
        problem(503, "TOO_MANY_SUBSCRIBERS", {"Retry-After": "3"}),
        lambda r: httpx.Response(200, stream=stream(_frames(change.format(n=1, t="UPDATED")))),  # type: ignore[call-arg]
        lambda r: httpx.Response(200, stream=stream(_frames(change.format(n=2, t="DELETED")))))  # type: ignore[call-arg]


def test_the_feed_waits_the_retry_after_of_a_429_and_a_503_before_opening_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import arbiter_client.sync

    slept, retried = _Sleeps(), []
    monkeypatch.setattr(arbiter_client.sync, "time", slept)
    script = _feed_script(_Stream)
    # a backoff of ~1 ms: only a Retry-After read from the answer makes these waits seconds long
    with Client(BASE, "tok", transport=httpx.MockTransport(script), retry=RetryPolicy(base_s=0.001, jitter=0.2),
                on_retry=lambda e, wait: retried.append((e.code, wait))) as client:
        assert [(c.version, c.type) for c in client.changes("o")] == [(1, "UPDATED"), (2, "DELETED")]
    assert [code for code, _ in retried] == ["RATE_LIMITED", "TOO_MANY_SUBSCRIBERS", "TRANSPORT_FAILED"]
    assert 5.0 <= slept.seconds[0] <= 6.0 and 3.0 <= slept.seconds[1] <= 3.6 and slept.seconds[2] < 0.01, slept.seconds
    assert slept.seconds == [wait for _, wait in retried]


def test_the_async_feed_waits_the_retry_after_of_a_429_and_a_503_before_opening_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import arbiter_client.aio

    slept, retried = _Sleeps(), []

    async def sleep(seconds: float) -> None:
        slept.sleep(seconds)
        await asyncio.sleep(0)

    monkeypatch.setattr(arbiter_client.aio, "asyncio", type("FakeAsyncio", (), {"sleep": staticmethod(sleep)}))
    script = _feed_script(_AsyncStream)

    async def read() -> list[tuple[int, str]]:
        async with AsyncClient(BASE, "tok", transport=httpx.MockTransport(script),
                               retry=RetryPolicy(base_s=0.001, jitter=0.2),
                               on_retry=lambda e, wait: retried.append((e.code, wait))) as client:
            return [(c.version, c.type) async for c in client.changes("o")]

    assert asyncio.run(read()) == [(1, "UPDATED"), (2, "DELETED")]
    assert [code for code, _ in retried] == ["RATE_LIMITED", "TOO_MANY_SUBSCRIBERS", "TRANSPORT_FAILED"]
    assert 5.0 <= slept.seconds[0] <= 6.0 and 3.0 <= slept.seconds[1] <= 3.6 and slept.seconds[2] < 0.01, slept.seconds
    assert slept.seconds == [wait for _, wait in retried]
