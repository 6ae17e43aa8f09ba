"""Groups are tied to the issuer that asserts them, through the whole pipeline (issue 35, item 1): two OIDC
providers named ``corp`` and ``partner`` (real HTTP discovery and JWKS on 127.0.0.1) and Arbiter's own issuer, bare,
trusted by one API. A grant to corp's ``finance`` group holds for corp's members only: a partner user or a local
user whose token lists ``finance`` is refused on reads, lists and edits, the edit by the real validator, deciding
from the groups the API put into the signed command; and a grant to the bare issuer's ``finance`` is not corp's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from app.api.callers.identity import build_verifier
from app.settings import Settings
from schemas import codec
from tests.integration.test_api_support import (
    TestClient,
    api_client,
    consume_all,
    decided,
    is_problem,
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
def module_settings(shared_arbiter: tuple[Settings, TestClient], providers: tuple[Provider, Provider]) -> Settings:
    """The shared running Arbiter's settings (its topics, validator, DB projection and read model) with this module's
    issuers: only the API is reconfigured (the validator decides from the groups in the signed command), so the API
    is the module's own."""
    s, _ = shared_arbiter
    corp, partner = providers
    return s.model_copy(update={"wait_max_s": 60.0, "oidc_issuer": [f"corp={corp.issuer}", f"partner={partner.issuer}"],
                                "local_issuer": True, "oidc_audience": [AUDIENCE]})


@pytest.fixture(scope="module")
def client(module_settings: Settings) -> Iterator[TestClient]:
    with api_client(module_settings) as c:
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
    s, ledger, legacy = module_settings, f"ledger-{uuid.uuid4().hex[:8]}", f"legacy-{uuid.uuid4().hex[:8]}"
    corp, partner = providers
    alice = corp.token("c1", sub="alice", scope=SCOPES, jti="a")  # corp:alice
    bob = corp.token("c1", sub="bob", scope=SCOPES, groups=["finance"], jti="b")  # corp:bob, corp's finance
    mallory = partner.token("p1", sub="mallory", scope=SCOPES, groups=["finance"], jti="m")  # partner's finance
    carol = token(s, "carol", groups=("finance",))  # the bare local issuer's finance
    decided(client.post("/objects", json={"id": ledger, "document": {"t": 0}}, headers=_h(alice, True)), 201, '"1"')
    # corp's finance team, named as the API names it from corp's token (the same verifier the API builds)
    finance = "group:" + build_verifier(s).verify(bob).groups[0]
    decided(client.put(f"/objects/{ledger}/editors/{finance}", headers=_h(alice, True)), 200, '"2"')
    # corp's finance member edits (decided by the validator from the command's groups) and reads
    decided(client.patch(f"/objects/{ledger}", json={"t": 1}, headers=_h(bob, True)), 200, '"3"')
    read_until(client, f"/objects/{ledger}", _h(bob), '"3"')
    assert ledger in _ids(client, _h(bob), "&role=editor")
    for outsider in (mallory, carol):
        is_problem(client.get(f"/objects/{ledger}", headers=_h(outsider)), 404, "NOT_FOUND")
        is_problem(client.get(f"/objects/{ledger}/events", headers=_h(outsider)), 404, "NOT_FOUND")
        assert ledger not in _ids(client, _h(outsider)) + _ids(client, _h(outsider), "&role=editor")
        is_problem(client.patch(f"/objects/{ledger}", json={"t": 9}, headers=_h(outsider, True)), 404, "NOT_FOUND")
    ledgers = [codec.decode_command(m.value()) for m in consume_all(s, s.topic_commands, 6) if m.key() == ledger.encode()]
    cmd = next(c for c in ledgers if c.object_id == ledger and c.principal == "partner:mallory")
    assert cmd.groups == ("partner:finance",) and cmd.issuer == partner.issuer
    assert finance == "group:corp:finance"
    # and the other way: a grant to the bare issuer's finance is not held by corp's finance
    dave = token(s, "dave")
    decided(client.post("/objects", json={"id": legacy, "document": {}}, headers=_h(dave, True)), 201, '"1"')
    decided(client.put(f"/objects/{legacy}/readers/group:finance", headers=_h(dave, True)), 200, '"2"')
    read_until(client, f"/objects/{legacy}", _h(carol), '"2"')
    is_problem(client.get(f"/objects/{legacy}", headers=_h(bob)), 404, "NOT_FOUND")
    assert legacy not in _ids(client, _h(bob))
