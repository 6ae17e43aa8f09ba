"""Groups are tied to the issuer that asserts them (issue 35, item 1): a named issuer's groups are namespaced exactly
as its principals are, always; a bare issuer cannot take a named one's names; an issuer whose groups claim is not
believed gives no groups. A grant to ``group:corp:finance`` is not satisfied by another issuer's ``finance``: on a
read (the API's check) nor in the command the validator decides (``decide``, the validator's own function)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.auth import Unauthorized
from app.api.identity import build_verifier, dev_token
from app.api.main import create_app
from app.api.submit import for_caller, update_command
from app.limits import GROUP_NAME_BYTES
from app.settings import Settings
from commands.decide import decide
from commands.errors import ReasonCode
from commands.rejection import Rejection
from commands.state import ObjectState
from tests.unit.fake_read_model import FakeReadModel, View
from tests.unit.oidc_provider import AUDIENCE, Provider

pytestmark = pytest.mark.unit

SCOPES = "arbiter:read arbiter:write arbiter:share"


@pytest.fixture
def corp() -> Iterator[Provider]:
    p = Provider("corp")
    p.add_key("c1")
    yield p
    p.close()


@pytest.fixture
def partner() -> Iterator[Provider]:
    p = Provider("partner")
    p.add_key("p1")
    yield p
    p.close()


def two_providers(corp: Provider, partner: Provider, tmp_path: Path, **extra: Any) -> Settings:  # noqa: ANN401
    return Settings(**{"var_dir": tmp_path / "var", "oidc_audience": [AUDIENCE], "oidc_leeway_s": 5,
                       "oidc_issuer": [f"corp={corp.issuer}", f"partner={partner.issuer}"], **extra})


def provider_and_local(corp: Provider, tmp_path: Path, **extra: Any) -> Settings:  # noqa: ANN401
    return Settings(**{"var_dir": tmp_path / "var", "oidc_audience": [AUDIENCE], "oidc_leeway_s": 5,
                       "oidc_issuer": [f"corp={corp.issuer}"], "local_issuer": True, **extra})


def test_groups_are_namespaced_as_principals_are(corp: Provider, partner: Provider, tmp_path: Path) -> None:
    v = build_verifier(two_providers(corp, partner, tmp_path))
    c = v.verify(corp.token("c1", sub="alice", groups=["finance", "/ops"]))
    p = v.verify(partner.token("p1", sub="alice", groups=["finance"]))
    assert (c.principal, c.groups) == ("corp:alice", ("corp:finance", "corp:ops"))
    assert (p.principal, p.groups) == ("partner:alice", ("partner:finance",))


def test_the_development_issuer_beside_a_provider(corp: Provider, tmp_path: Path) -> None:
    """Bare beside a named provider: its names stay bare, and may not look like the provider's."""
    s = provider_and_local(corp, tmp_path)
    v = build_verifier(s)
    local = v.verify(dev_token(s, "carol", groups=("finance", "corp:finance", "corp:x")))
    assert (local.principal, local.groups) == ("carol", ("finance",))  # "corp:..." would be the provider's
    with pytest.raises(Unauthorized, match="not a principal"):
        v.verify(dev_token(s, "corp:alice"))  # would be corp's alice
    assert v.verify(corp.token("c1", groups=["finance"])).groups == ("corp:finance",)
    named = s.model_copy(update={"local_issuer_name": "dev"})
    assert build_verifier(named).verify(dev_token(named, "carol", groups=("finance",))).groups == ("dev:finance",)


def test_a_namespaced_group_is_held_to_the_group_name_bound(corp: Provider, partner: Provider,
                                                            tmp_path: Path) -> None:
    v = build_verifier(two_providers(corp, partner, tmp_path))
    fits = "g" * (GROUP_NAME_BYTES - len("corp:"))
    over = "h" * (GROUP_NAME_BYTES - len("corp:") + 1)
    assert v.verify(corp.token("c1", groups=[fits, over])).groups == (f"corp:{fits}",)


def test_an_issuer_whose_groups_are_not_believed_has_none(corp: Provider, partner: Provider, tmp_path: Path) -> None:
    v = build_verifier(two_providers(corp, partner, tmp_path, oidc_groups_issuers=["corp"]))
    assert v.verify(corp.token("c1", groups=["finance"])).groups == ("corp:finance",)
    assert v.verify(partner.token("p1", groups=["finance"])).groups == ()
    s = provider_and_local(corp, tmp_path, oidc_groups_issuers=["urn:arbiter:local"])  # a bare one by its iss
    v = build_verifier(s)
    assert v.verify(dev_token(s, "carol", groups=("finance",))).groups == ("finance",)
    assert v.verify(corp.token("c1", groups=["finance"])).groups == ()
    with pytest.raises(ValueError, match="no trusted issuer"):
        build_verifier(two_providers(corp, partner, tmp_path, oidc_groups_issuers=["crop"]))


def test_two_bare_issuers_are_refused_at_start(corp: Provider, partner: Provider, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="have no name"):
        build_verifier(two_providers(corp, partner, tmp_path, oidc_issuer=[corp.issuer, partner.issuer]))
    with pytest.raises(ValueError, match="have no name"):
        build_verifier(provider_and_local(corp, tmp_path, oidc_issuer=[corp.issuer]))
    with pytest.raises(ValueError, match="share a name"):
        build_verifier(two_providers(corp, partner, tmp_path, oidc_issuer=[f"x={corp.issuer}", f"x={partner.issuer}"]))
    with pytest.raises(ValueError, match="issuer name"):
        build_verifier(two_providers(corp, partner, tmp_path, oidc_issuer=[f"a:b={corp.issuer}"]))


@pytest.mark.parametrize("case", ["two-providers", "provider-and-local"])
def test_a_corp_group_grant_is_not_held_by_another_issuers_member(case: str, corp: Provider, partner: Provider,
                                                                  tmp_path: Path) -> None:
    """The read check of the API and the validator's ``decide`` over the command the API builds."""
    if case == "two-providers":
        s = two_providers(corp, partner, tmp_path)
        outsider = partner.token("p1", sub="mallory", scope=SCOPES, groups=["finance"])
    else:
        s = provider_and_local(corp, tmp_path)
        outsider = dev_token(s, "mallory", groups=("finance",))
    member = corp.token("c1", sub="bob", scope=SCOPES, groups=["finance"])
    v = build_verifier(s)
    grants = tuple(f"group:{g}" for g in v.verify(member).groups)  # corp's finance team, as corp's token names it
    assert grants == ("group:corp:finance",)
    rm = FakeReadModel({"ledger": View({"t": 1}, 3, owner="corp:alice", editors=grants, readers=grants)})
    client = TestClient(create_app(s, read_model=rm))
    assert client.get("/objects/ledger", headers={"Authorization": f"Bearer {member}"}).json() == {"t": 1}
    r = client.get("/objects/ledger", headers={"Authorization": f"Bearer {outsider}"})
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", r.text

    state = ObjectState(True, False, 3, "corp:alice", editors=grants, readers=grants)
    for token, accepted in ((member, True), (outsider, False)):
        caller = v.verify(token)
        cmd = for_caller(update_command(caller.principal, "ledger", {"t": 2}, None, None), caller)
        decision = decide(state, cmd)
        assert decision.accepted is accepted, (caller, decision.outcome)
        if not accepted:
            assert isinstance(decision.outcome, Rejection) and decision.outcome.reason is ReasonCode.NOT_FOUND
