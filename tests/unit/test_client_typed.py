"""The Python client's typed creates: ``create(..., type=...)`` sends the type, and every reason code a team's rules
decide on a create comes back as its typed error, in the sync and the async client alike."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from arbiter_client import Accepted, AsyncClient, Client, RetryPolicy, RuleViolated
from arbiter_client.errors import Rejected, RuleError

pytestmark = pytest.mark.unit

BASE = "http://arbiter.test"


def rejected(code: str, **extra: Any) -> httpx.Response:  # noqa: ANN401
    body = {"type": f"urn:arbiter:problem:{code.lower()}", "title": code, "status": 422, "detail": code, "code": code,
            **extra}
    return httpx.Response(422, json=body, headers={"content-type": "application/problem+json"})


def created() -> httpx.Response:
    return httpx.Response(201, headers={"ETag": '"1"'}, json={"command_id": "k", "object_id": "o-1",
                                                              "status": "accepted", "version": 1, "event": "CREATED"})


class Recorder:
    """Answers every request with ``answer`` and keeps the requests' JSON bodies."""

    def __init__(self, answer: httpx.Response) -> None:
        self.answer, self.bodies = answer, []  # type: list[Any]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return self.answer


# (reason code, the class it must raise, the problem's members)
RULE_CODES = [
    ("RULE_VIOLATED", RuleViolated, {"rule": "order:schema", "rule_message": "total must be a number",
                                     "rule_pointers": ["/total"], "rules_version": 3}),
    ("RULE_ERROR", RuleError, {"rule": "order:guard-1", "rules_version": 3}),
    ("RULES_VERSION_UNKNOWN", Rejected, {"rules_version": 9}),
]


def test_a_typed_create_sends_its_type_and_an_untyped_one_does_not() -> None:
    rec = Recorder(created())
    with Client(BASE, "tok", transport=httpx.MockTransport(rec)) as client:
        out = client.create({"total": 5}, "o-1", type="order")
        client.create({"total": 5}, "o-2")
        client.create({"total": 5}, type="order")
    assert isinstance(out, Accepted) and out.version == 1
    assert rec.bodies == [{"id": "o-1", "document": {"total": 5}, "type": "order"},
                          {"id": "o-2", "document": {"total": 5}},
                          {"document": {"total": 5}, "type": "order"}]


def test_the_async_client_sends_the_type_too() -> None:
    rec = Recorder(created())

    async def go() -> None:
        async with AsyncClient(BASE, "tok", transport=httpx.MockTransport(rec)) as client:
            await client.create({"total": 5}, "o-1", type="order")

    asyncio.run(go())
    assert rec.bodies == [{"id": "o-1", "document": {"total": 5}, "type": "order"}]


@pytest.mark.parametrize(("code", "cls", "members"), RULE_CODES, ids=[c for c, _, _ in RULE_CODES])
def test_every_rules_reason_code_on_a_typed_create_is_its_typed_error(code: str, cls: type[Rejected],
                                                                     members: dict[str, Any]) -> None:
    with Client(BASE, "tok", transport=httpx.MockTransport(Recorder(rejected(code, **members)))) as client, \
            pytest.raises(cls) as sync_err:
        client.create({"total": "x"}, "o-1", type="order")

    async def go() -> None:
        async with AsyncClient(BASE, "tok", transport=httpx.MockTransport(Recorder(rejected(code, **members)))) as c:
            await c.create({"total": "x"}, "o-1", type="order")

    with pytest.raises(cls) as async_err:
        asyncio.run(go())
    for err in (sync_err.value, async_err.value):
        assert err.code == code and err.status == 422
        if isinstance(err, RuleViolated):
            assert (err.rule, err.rules_version) == (members["rule"], 3)
            assert err.pointers == members.get("rule_pointers", [])


def test_several_replicas_take_requests_in_turn_and_a_transport_failure_goes_to_the_next() -> None:
    """Two API replicas: requests alternate; a write whose replica is down is sent to the other with its key."""
    seen: list[tuple[str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("idempotency-key")))
        assert request.headers["host"] == request.url.host + (f":{request.url.port}" if request.url.port else "")
        if request.url.host == "down.test":
            raise httpx.ConnectError("connection refused", request=request)
        return created()

    urls = ["http://up.test/", "http://down.test"]
    with Client(urls, "tok", transport=httpx.MockTransport(answer), retry=RetryPolicy(base_s=0.001)) as client:
        client.create({"n": 1}, "o-1")            # up.test
        client.create({"n": 2}, "o-2", key="K")   # down.test, then up.test with the same key
        client.create({"n": 3}, "o-3")
    hosts = [h for h, _ in seen]
    assert hosts == ["up.test", "down.test", "up.test", "down.test", "up.test"]  # in turn, each failure moved on
    assert seen[1][1] == seen[2][1] == "K"
    with pytest.raises(ValueError, match="at least one base URL"):
        Client([], "tok")
