"""Which claims the rules catalog takes: a claim signed with a key Arbiter does not trust never becomes a version."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from app.rules.catalog import winners
from app.rules.control import CONTROL_KEY, Deploy, claim_headers, encode_control
from app.settings import Settings
from app.validator.topic_io import Record
from commands.rules import canonical_rules, rules_digest

pytestmark = pytest.mark.unit

S = Settings()
T0 = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
DOC = canonical_rules('{"rules": 1, "types": {}}')
OURS = Deploy(1, rules_digest(DOC), DOC, "ops:alice", T0, None)
THEIRS = replace(OURS, principal="mallory")
FOREIGN = {  # a claim signed by a signer Arbiter's settings do not trust
    "the same key id, another secret": Settings(auth_secret=SecretStr("another secret, not this deployment's")),
    "another key id": Settings(record_keys={"elsewhere": SecretStr("a key this deployment never had")}),
}


def claim(deploy: Deploy, signed_by: Settings, offset: int) -> Record:
    value = encode_control(deploy)
    return Record(S.rules_topic, 0, offset, CONTROL_KEY, value, tuple(claim_headers(signed_by, value)))


@pytest.mark.parametrize("foreign", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_claim_signed_with_another_key_is_ignored_and_the_genuine_one_wins(foreign: Settings) -> None:
    assert winners([claim(THEIRS, foreign, 0)], S) == []  # it never shows as the deployed version
    assert winners([claim(THEIRS, foreign, 0), claim(OURS, S, 1)], S) == [OURS]
    assert winners([claim(THEIRS, S, 0)], foreign) == []  # and the other way round
    assert winners([claim(OURS, S, 0), claim(replace(THEIRS, version=2), foreign, 1)], S) == [OURS]


@pytest.mark.parametrize("foreign", FOREIGN.values(), ids=FOREIGN.keys())
def test_letting_unsigned_commands_in_does_not_let_foreign_claims_into_the_catalog(foreign: Settings) -> None:
    # ARBITER_ALLOW_UNSIGNED_COMMANDS opens the commands topic to other producers, not the rules catalog
    lenient = S.model_copy(update={"allow_unsigned_commands": True})
    assert winners([claim(THEIRS, foreign, 0), claim(OURS, S, 1)], lenient) == [OURS]
    unsigned = Record(S.rules_topic, 0, 0, CONTROL_KEY, encode_control(THEIRS),
                      tuple(h for h in claim(THEIRS, S, 0).headers if h[0] != "arbiter-signature"))
    assert winners([unsigned, claim(OURS, S, 1)], lenient) == [OURS]
