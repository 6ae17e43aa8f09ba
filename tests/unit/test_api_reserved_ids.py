"""Object ids starting ``arbiter:`` are Arbiter's own records' keys (issue 47, findings 3 and 7): the API signs no
command for one, on any route that takes an object id, and the validator rejects one from any other producer."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.callers.identity import dev_token
from app.api.deps import ApiContext
from app.api.main import create_app
from app.settings import Settings
from commands import CreateObject, DeleteObject, ReasonCode, Rejection, UpdateObject, decide

pytestmark = pytest.mark.unit

RESERVED = ["arbiter:generation", "arbiter:rules", "arbiter:x"]


class _Recorder:
    """A producer that records what it was asked to send: nothing, for a reserved id."""

    traced = False

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, key: str, value: bytes) -> None:
        from app.errors import BrokerUnavailable

        self.sent.append(key)
        raise BrokerUnavailable("no broker in this test")

    async def send_many(self, records: list[tuple[str, bytes]]) -> list[Any]:
        from app.errors import BrokerUnavailable

        self.sent.extend(k for k, _ in records)
        return [BrokerUnavailable("no broker in this test") for _ in records]


@pytest.fixture(params=[True, False], ids=["fast-writes", "routes"])
def api(request: pytest.FixtureRequest) -> tuple[TestClient, _Recorder, dict[str, str]]:
    s = Settings(api_fast_writes=request.param)
    app = create_app(s)
    producer = _Recorder()
    app.state.ctx = ApiContext(s, producer, app.state.outcomes, app.state.metrics, app.state.quotas)  # type: ignore[arg-type]
    return TestClient(app), producer, {"Authorization": f"Bearer {dev_token(s, 'mallory', ttl_s=60)}"}


def _refused(r: Any) -> None:  # noqa: ANN401 - an httpx response
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "RESERVED_ID", r.text


@pytest.mark.parametrize("object_id", RESERVED)
def test_every_write_route_refuses_a_reserved_id_and_produces_nothing(api, object_id: str) -> None:  # noqa: ANN001
    client, producer, auth = api
    merge = {**auth, "Content-Type": "application/merge-patch+json"}
    _refused(client.post("/objects", json={"id": object_id, "document": {}}, headers=auth))
    _refused(client.patch(f"/objects/{object_id}", content=b"{}", headers=merge))
    _refused(client.delete(f"/objects/{object_id}", headers=auth))
    for kind in ("editors", "readers"):
        _refused(client.put(f"/objects/{object_id}/{kind}/bob", headers=auth))
        _refused(client.delete(f"/objects/{object_id}/{kind}/bob", headers=auth))
    assert producer.sent == []


@pytest.mark.parametrize("object_id", RESERVED)
def test_the_batch_route_refuses_a_reserved_id_item_by_item(api, object_id: str) -> None:  # noqa: ANN001
    client, producer, auth = api
    r = client.post("/commands:batch", headers=auth, json={"commands": [
        {"kind": "create", "object_id": object_id, "document": {}},
        {"kind": "update", "object_id": object_id, "patch": {}},
        {"kind": "create", "object_id": "arbiter-ok", "document": {}}]})
    codes = [c.get("code") for c in r.json()["results"]]
    assert codes[:2] == ["RESERVED_ID", "RESERVED_ID"] and codes[2] != "RESERVED_ID", r.text
    assert producer.sent == ["arbiter-ok"]


@pytest.mark.parametrize("path", ["/objects/arbiter:rules", "/objects/arbiter:rules/events",
                                  "/objects/arbiter:generation/changes"])
def test_reads_of_a_reserved_id_are_refused_by_code(api, path: str) -> None:  # noqa: ANN001
    client, _, auth = api

    class Nothing:  # a read model that knows no object (and must not be asked)
        def __getattr__(self, name: str) -> Any:  # noqa: ANN401
            raise AssertionError(f"the read model was asked {name}")

    client.app.state.read_model = Nothing()  # type: ignore[attr-defined]
    _refused(client.get(path, headers=auth))


def test_an_id_that_only_looks_alike_is_an_ordinary_id(api) -> None:  # noqa: ANN001
    client, producer, auth = api
    for ok in ("Arbiter:rules", "arbiter-rules", "x:arbiter:rules", "arbiter"):
        r = client.post("/objects", json={"id": ok, "document": {}}, headers=auth)
        assert r.status_code == 503, r.text  # past the API's checks, to the (absent) broker
    assert producer.sent == ["Arbiter:rules", "arbiter-rules", "x:arbiter:rules", "arbiter"]


T0 = datetime(2026, 11, 27, tzinfo=UTC)


@pytest.mark.parametrize("object_id", RESERVED)
def test_the_validator_rejects_a_reserved_id_from_any_producer_malformed(object_id: str) -> None:
    for cmd in (CreateObject("c1", object_id, "mallory", T0, document="{}"),
                UpdateObject("c2", object_id, "mallory", T0, patch="{}"),
                DeleteObject("c3", object_id, "mallory", T0)):
        outcome = decide(None, cmd).outcome
        assert isinstance(outcome, Rejection) and outcome.reason == ReasonCode.MALFORMED
        assert "reserved" in outcome.message
