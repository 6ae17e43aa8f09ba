"""HTTP header conventions of the write routes: Prefer: wait (RFC 7240), If-Match, Idempotency-Key."""

from __future__ import annotations

import pytest

from app.api.problems import STATUS, ApiError, status_of
from app.api.writes.submit import command_id, expected_version, prefer_wait
from commands import ReasonCode

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("headers", "expected"), [
    ([], None),
    (["wait=5"], 5.0),
    (["respond-async, wait=2.5"], 2.5),
    (['wait="3"'], 3.0),
    (["handling=strict", "WAIT = 4"], 4.0),
    (["wait=100"], 30.0),          # capped
    (["wait=-1"], None),           # not a delta-seconds: ignored, as RFC 7240 says
    (["wait=soon"], None),
    (["wait=1;foo=bar"], 1.0),
])
def test_prefer_wait(headers: list[str], expected: float | None) -> None:
    assert prefer_wait(headers, cap=30.0) == expected


def test_if_match() -> None:
    assert expected_version(None) is None
    assert expected_version('"0"') == 0
    assert expected_version('"42"') == 42
    for bad in ["42", 'W/"42"', '"1", "2"', "*", '"x"']:
        with pytest.raises(ApiError) as e:
            expected_version(bad)
        assert e.value.code == "BAD_REQUEST"


def test_idempotency_key_becomes_the_command_id() -> None:
    assert command_id("retry-me") == "retry-me"
    a, b = command_id(None), command_id(None)
    assert a != b and len(a) == 36


def test_status_mapping() -> None:
    assert status_of(ReasonCode.VERSION_CONFLICT) == 409
    assert status_of(ReasonCode.VERSION_CONFLICT, expected_version=3) == 412
    assert [status_of(c) for c in ("NOT_FOUND", "FORBIDDEN", "DELETED", "ALREADY_EXISTS")] == [404, 403, 410, 409]
    assert status_of("BROKER_UNAVAILABLE") == 503 and status_of("UNAUTHORIZED") == 401
    assert status_of(ReasonCode.IDEMPOTENCY_KEY_REUSED) == 422
    assert status_of("TOO_MANY_WAITERS") == 503 and status_of("UNSERVABLE_DOCUMENT") == 503
    assert all(400 <= status_of(c) < 500 for c in ReasonCode)  # no reason code is ever a 5xx
    assert {c for c, s in STATUS.items() if s >= 500} <= {"BROKER_UNAVAILABLE", "READ_MODEL_UNAVAILABLE",
                                                          "TOO_MANY_WAITERS", "UNSERVABLE_DOCUMENT",
                                                          "VIEW_STALE", "DOCUMENT_QUARANTINED", "POSITION_NOT_REACHED",
                                                          "IDENTITY_PROVIDER_UNAVAILABLE", "TOO_MANY_SUBSCRIBERS",
                                                              "WRITES_PAUSED"}
    assert {s for s in STATUS.values() if s >= 500} == {503}


def test_every_503_says_when_to_retry_even_when_raised_below_a_route() -> None:
    """A coded 503 raised by code that knows nothing of HTTP (``WRITES_PAUSED`` from ``app.rescale``, as ``PUT /rules``
    meets it) still answers ``Retry-After`` (the settings' ``retry_after_s``); one a route set is kept."""
    from types import SimpleNamespace

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from app.api.problems import install
    from app.rescale.errors import WritesPaused

    app = FastAPI()
    install(app)
    app.state.settings = SimpleNamespace(retry_after_s=7)

    @app.get("/paused")
    def paused() -> None:
        raise WritesPaused("a rescale is cutting the commands topic over")

    @app.get("/own")
    def own() -> None:
        raise ApiError("busy", code="TOO_MANY_WAITERS", headers={"Retry-After": "2"})

    @app.get("/bad")
    def bad() -> None:
        raise ApiError("no", code="INVALID_REQUEST")

    client = TestClient(app)
    answer = client.get("/paused")
    assert (answer.status_code, answer.json()["code"], answer.headers.get("Retry-After")) == (503, "WRITES_PAUSED", "7")
    assert client.get("/own").headers["Retry-After"] == "2"
    assert "Retry-After" not in client.get("/bad").headers
