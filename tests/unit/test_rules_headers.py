"""The CloudEvents headers name the rules version a decision was made under (``ce_rulesversion``), and only then:
an output decided under no rules keeps the headers it always had, and the rocksdb backend re-emits the same bytes."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from app.contract.asyncapi import document
from app.settings import Settings
from app.validator.headers import RULES_VERSION, ce_headers
from app.validator.outputs import outcome_record
from app.validator.rocks.frames import decode_outputs, encode_outputs
from commands import CreateObject, Event, Rejection, UpdateObject, decide
from tests.unit.rules_support import ORDER, create_order, orders, update

pytestmark = pytest.mark.unit

S = Settings()
T0 = datetime(2025, 3, 1, tzinfo=UTC)
UNRULED = ["ce_specversion", "ce_id", "ce_type", "ce_source", "ce_subject", "ce_time", "content-type"]


def test_a_decision_under_no_rules_keeps_todays_headers() -> None:
    created = decide(None, CreateObject("c", "o", "alice", T0, document="{}"))
    assert isinstance(created.outcome, Event) and created.outcome.rules_version is None
    refused = decide(created.state, UpdateObject("u", "o", "alice", T0, patch="{}", expected_version=7)).outcome
    assert isinstance(refused, Rejection) and refused.rules_version is None
    for outcome in (created.outcome, refused):
        assert [name for name, _ in ce_headers(outcome, S.topic_commands)] == UNRULED


def test_every_output_decided_under_rules_names_its_version_before_content_type() -> None:
    rules = orders(version=7)
    created = create_order(rules)
    refused = update(created.state, {"status": "approved"}, rules)  # draft -> approved skips submitted
    untyped = decide(None, CreateObject("c2", "o2", "alice", T0, document="{}"), rules=rules)
    assert isinstance(refused.outcome, Rejection) and refused.outcome.rule is not None
    for outcome in (created.outcome, refused.outcome, untyped.outcome):
        headers = ce_headers(outcome, S.topic_commands)
        names = [name for name, _ in headers]
        assert names == [*UNRULED[:-1], RULES_VERSION, "content-type"], names
        assert dict(headers)[RULES_VERSION] == b"7"


def test_the_extension_name_is_a_valid_cloudevents_attribute_and_documented() -> None:
    assert RULES_VERSION.startswith("ce_") and re.fullmatch(r"[a-z0-9]{1,20}", RULES_VERSION[3:])
    outcome = create_order(orders(version=12)).outcome
    for message in ("Event", "Rejection"):
        prop = document(S)["components"]["messages"][message]["headers"]["properties"][RULES_VERSION]
        assert re.fullmatch(prop["pattern"], dict(ce_headers(outcome, S.topic_commands))[RULES_VERSION].decode())


def test_the_rocks_backend_re_emits_a_ruled_batch_with_the_same_headers() -> None:
    rules = orders(version=3)
    created = create_order(rules, priority=2)
    outcomes = [created.outcome, update(created.state, {"status": "approved"}, rules).outcome,
                create_order(None).outcome, decide(None, CreateObject("c", "o", "alice", T0, document="{}")).outcome]
    assert {o.rules_version for o in outcomes} == {3, None}
    trace = (("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),)
    batch = [outcome_record(o, S, 0, trace if i % 2 else ()) for i, o in enumerate(outcomes)]
    assert decode_outputs(encode_outputs(batch), S.topic_commands) == batch
    assert ORDER["status"] == "draft"  # the example the refusal above relies on
