"""Groups are tied to the issuer that asserts them, through the whole pipeline (issue 35, item 1): two OIDC
providers named ``corp`` and ``partner`` (real HTTP discovery and JWKS on 127.0.0.1) and Arbiter's own issuer, bare,
trusted by one API. A grant to corp's ``finance`` group holds for corp's members only: a partner user or a local
user whose token lists ``finance`` is refused on reads, lists and edits, the edit by the real validator, deciding
from the groups the API put into the signed command; and a grant to the bare issuer's ``finance`` is not corp's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.api.identity import build_verifier
from app.settings import Settings
from tests.integration.test_api_support import (
    TestClient,
    api_client,
    decided,
    is_problem,
    live_pipeline,
    module_settings_for,
    produced_commands,
    read_until,
    token,
)
from tests.unit.oidc_provider import AUDIENCE, Provider

pytestmark = pytest.mark.integration

SCOPES = "arbiter:read arbiter:write arbiter:share"


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[Provider, Provider]]:
    corp, partner = Provider("corp"), Provider("partner")
    corp.add_key("c1")
    partner.add_key("p1")
    yield corp, partner
    corp.close()
    partner.close()


@pytest.fixture(scope="module")
def module_settings(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory,
                    providers: tuple[Provider, Provider]) -> Settings:
    corp, partner = providers
    return module_settings_for(base_settings, tmp_path_factory, "api-issuers", wait_max_s=60.0,
                               oidc_issuer=[f"corp={corp.issuer}", f"partner={partner.issuer}"],
                               local_issuer=True, oidc_audience=[AUDIENCE])


@pytest.fixture(scope="module")
def client(spark: Any, module_settings: Settings) -> Iterator[TestClient]:  # noqa: ANN401
    with live_pipeline(spark, module_settings), api_client(module_settings) as c:
        yield c


def _h(tok: str, wait: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}", **({"Prefer": "wait=60"} if wait else {})}


def _ids(client: TestClient, headers: dict[str, str], query: str = "") -> list[str]:
    got, cursor = [], None
    while True:
        page = client.get(f"/objects?limit=100{query}" + (f"&cursor={cursor}" if cursor else ""),
                          headers=headers).json()
        got += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return got


def test_a_group_grant_holds_only_for_the_members_of_its_issuer(client: TestClient, module_settings: Settings,
                                                                providers: tuple[Provider, Provider]) -> None:
    s = module_settings
    corp, partner = providers
    alice = corp.token("c1", sub="alice", scope=SCOPES, jti="a")  # corp:alice
    bob = corp.token("c1", sub="bob", scope=SCOPES, groups=["finance"], jti="b")  # corp:bob, corp's finance
    mallory = partner.token("p1", sub="mallory", scope=SCOPES, groups=["finance"], jti="m")  # partner's finance
    carol = token(s, "carol", groups=("finance",))  # the bare local issuer's finance
    decided(client.post("/objects", json={"id": "ledger", "document": {"t": 0}}, headers=_h(alice, True)), 201, '"1"')
    # corp's finance team, named as the API names it from corp's token (the same verifier the API builds)
    finance = "group:" + build_verifier(s).verify(bob).groups[0]
    decided(client.put(f"/objects/ledger/editors/{finance}", headers=_h(alice, True)), 200, '"2"')
    # corp's finance member edits (decided by the validator from the command's groups) and reads
    decided(client.patch("/objects/ledger", json={"t": 1}, headers=_h(bob, True)), 200, '"3"')
    read_until(client, "/objects/ledger", _h(bob), '"3"')
    assert "ledger" in _ids(client, _h(bob), "&role=editor")
    for outsider in (mallory, carol):
        is_problem(client.get("/objects/ledger", headers=_h(outsider)), 404, "NOT_FOUND")
        is_problem(client.get("/objects/ledger/events", headers=_h(outsider)), 404, "NOT_FOUND")
        assert "ledger" not in _ids(client, _h(outsider)) + _ids(client, _h(outsider), "&role=editor")
        is_problem(client.patch("/objects/ledger", json={"t": 9}, headers=_h(outsider, True)), 404, "NOT_FOUND")
    cmd = next(c for c in produced_commands(s, 6) if c.object_id == "ledger" and c.principal == "partner:mallory")
    assert cmd.groups == ("partner:finance",) and cmd.issuer == partner.issuer
    assert finance == "group:corp:finance"
    # and the other way: a grant to the bare issuer's finance is not held by corp's finance
    dave = token(s, "dave")
    decided(client.post("/objects", json={"id": "legacy", "document": {}}, headers=_h(dave, True)), 201, '"1"')
    decided(client.put("/objects/legacy/readers/group:finance", headers=_h(dave, True)), 200, '"2"')
    read_until(client, "/objects/legacy", _h(carol), '"2"')
    is_problem(client.get("/objects/legacy", headers=_h(bob)), 404, "NOT_FOUND")
    assert "legacy" not in _ids(client, _h(bob))
