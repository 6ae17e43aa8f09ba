"""decide under the team's rules: the order example of issue 36 and each rule's semantics, one test per rule."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from commands import (
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    ObjectState,
    ReasonCode,
    Rejection,
    decide,
)
from commands.rules.bounds import MAX_MESSAGE_BYTES, MAX_POINTER_BYTES
from schemas import codec
from tests.unit.rules_support import ORDER, T0, create_order, orders, update, with_rules

pytestmark = pytest.mark.unit

RULES = orders()


def created(**changes: Any) -> ObjectState:  # noqa: ANN401
    decision = create_order(RULES, **changes)
    assert decision.accepted, decision.outcome
    assert decision.state is not None
    return decision.state


def refused(state: ObjectState | None, decision: Any, reason: ReasonCode, rule: str) -> Rejection:  # noqa: ANN401
    outcome = decision.outcome
    assert isinstance(outcome, Rejection), outcome
    assert (outcome.reason, outcome.rule) == (reason, rule), outcome
    assert decision.state is state  # a rejection leaves the state as it was (the same object)
    assert outcome.rules_version == RULES.version
    assert codec.decode_outcome(codec.encode_outcome(outcome)) == outcome
    return outcome


def moved(state: ObjectState, patch: dict[str, Any], **kw: Any) -> ObjectState:  # noqa: ANN401
    decision = update(state, patch, RULES, **kw)
    assert isinstance(decision.outcome, Event), decision.outcome
    assert decision.outcome.rules_version == RULES.version and decision.outcome.object_type == "order"
    assert decision.state is not None
    return decision.state


def test_a_typed_create_keeps_its_type_and_tracked_fields_and_names_the_rules_version() -> None:
    decision = create_order(RULES)
    event, state = decision.outcome, decision.state
    assert isinstance(event, Event) and state is not None
    assert (event.object_type, event.rules_version) == ("order", 1)
    assert state.object_type == "order"
    assert json.loads(state.tracked or "") == {"/status": "draft", "/amount": 20000, "/customer": "acme"}
    assert codec.decode_state(codec.encode_state(state)) == state
    assert codec.decode_outcome(codec.encode_outcome(event)) == event


def test_the_order_moves_draft_submitted_approved_and_never_back() -> None:
    state = created()
    back = refused(state, update(state, {"status": "approved"}, RULES), ReasonCode.RULE_VIOLATED, "order:status-flow")
    assert back.rule_pointers == ("/status",)
    assert back.rule_message == "an order moves draft -> submitted -> approved or rejected, and never back"
    assert "order:status-flow" in back.message
    state = moved(state, {"status": "submitted"})
    state = moved(state, {"status": "rejected"})
    for again in ("draft", "submitted", "approved"):
        refused(state, update(state, {"status": again}, RULES), ReasonCode.RULE_VIOLATED, "order:status-flow")
    # removing the status: the patch schema's enum refuses null before the transition would
    refused(state, update(state, {"status": None}, RULES), ReasonCode.RULE_VIOLATED, "order:patch_schema")
    no_schema = with_rules({"rules": 1, "types": {"order": {"tracked": {"status": "/status"}, "transitions": [
        {"name": "flow", "field": "status", "allowed": {"draft": [], "rejected": []}}]}}})
    refused(state, update(state, {"status": None}, no_schema), ReasonCode.RULE_VIOLATED, "order:flow")


def test_only_finance_approves_an_amount_over_10000() -> None:
    state = moved(created(), {"status": "submitted"})
    sales = refused(state, update(state, {"status": "approved"}, RULES, groups=("sales",)), ReasonCode.RULE_VIOLATED,
                    "order:finance-approves-large")
    assert sales.rule_message == "approval over 10,000 needs finance"
    assert sales.rule_pointers == ("/amount", "/status")  # the tracked fields the guard reads
    approved = moved(state, {"status": "approved"}, groups=("finance",))
    assert json.loads(approved.tracked or "")["/status"] == "approved"
    small = moved(state, {"amount": 10000})
    moved(small, {"status": "approved"})  # 10,000 itself needs no finance


def test_the_customer_never_changes_and_other_members_do() -> None:
    state = created()
    refused(state, update(state, {"customer": "globex"}, RULES), ReasonCode.RULE_VIOLATED, "order:customer-immutable")
    refused(state, update(state, {"customer": None}, RULES), ReasonCode.RULE_VIOLATED, "order:customer-immutable")
    assert moved(state, {"title": "seven chairs", "customer": "acme"}).tracked == state.tracked


@pytest.mark.parametrize(("changes", "pointer"), [
    ({"title": "x" * 201}, "/title"),
    ({"priority": 0}, "/priority"),
    ({"priority": 6}, "/priority"),
    ({"priority": None}, "/"),
    ({"status": "submitted"}, "/status"),
])
def test_a_create_must_match_the_create_schema(changes: dict[str, Any], pointer: str) -> None:
    outcome = refused(None, create_order(RULES, **changes), ReasonCode.RULE_VIOLATED, "order:create_schema")
    assert outcome.rule_pointers == (pointer,) and outcome.current_version == 0


def test_the_create_schema_bounds_hold_at_the_limit() -> None:
    created(title="x" * 200, priority=1)
    created(title="é" * 200, priority=5)  # characters, not bytes


def test_a_patch_must_match_the_patch_schema() -> None:
    state = created()
    outcome = refused(state, update(state, {"priority": 9}, RULES), ReasonCode.RULE_VIOLATED, "order:patch_schema")
    assert outcome.rule_pointers == ("/priority",) and outcome.current_version == 1


def test_a_ticket_has_at_most_20_watchers() -> None:
    ticket = decide(None, CreateObject("t", "t1", "alice", T0, document=json.dumps(
        {"title": "t", "priority": 1, "watchers": [f"w{i}" for i in range(20)]}), object_type="ticket"), rules=RULES)
    assert ticket.accepted and ticket.state is not None
    one_more = {"watchers": [f"w{i}" for i in range(21)]}
    refused(ticket.state, update(ticket.state, one_more, RULES), ReasonCode.RULE_VIOLATED, "ticket:at-most-20-watchers")
    too_many = decide(None, CreateObject("t", "t2", "alice", T0, document=json.dumps(
        {"title": "t", "priority": 1, **one_more}), object_type="ticket"), rules=RULES)
    refused(None, too_many, ReasonCode.RULE_VIOLATED, "ticket:at-most-20-watchers")


def test_an_unknown_type_is_refused_and_with_no_rules_every_type_is_unknown() -> None:
    cmd = CreateObject("c", "o1", "alice", T0, document="{}", object_type="invoice")
    outcome = refused(None, decide(None, cmd, rules=RULES), ReasonCode.RULE_VIOLATED, "types")
    assert "rules version 1 has no such type" in (outcome.rule_message or "")
    bare = decide(None, cmd).outcome
    assert isinstance(bare, Rejection) and bare.reason is ReasonCode.RULE_VIOLATED and bare.rules_version is None
    bad_name = decide(None, replace(cmd, object_type="9 lives"), rules=RULES).outcome
    assert isinstance(bad_name, Rejection) and bad_name.reason is ReasonCode.MALFORMED


def test_an_update_of_a_type_that_left_the_rules_is_refused_but_a_delete_is_not() -> None:
    state = created()
    later = with_rules({"rules": 1, "types": {"ticket": {}}}, version=2)
    outcome = update(state, {"title": "y"}, later).outcome
    assert isinstance(outcome, Rejection) and (outcome.rule, outcome.rules_version) == ("types", 2)
    assert decide(state, DeleteObject("d", "o1", "alice", T0), rules=later).accepted


def test_untyped_objects_are_decided_as_before_with_the_rules_version_named() -> None:
    cmd = CreateObject("c", "o9", "alice", T0, document=json.dumps({"status": "anything"}))
    without, with_ = decide(None, cmd), decide(None, cmd, rules=RULES)
    assert with_.outcome == replace(without.outcome, rules_version=1) and with_.state == without.state
    assert without.outcome.rules_version is None
    assert without.state is not None and without.state.object_type is None and without.state.tracked is None


def test_a_guard_that_fails_at_run_time_is_rule_error_with_its_name() -> None:
    rules = with_rules({"rules": 1, "types": {"t": {"tracked": {"amount": "/amount"}, "guards": [
        {"name": "positive", "expr": "next.amount > 0", "message": "amount must be positive"}]}}})
    ok = decide(None, CreateObject("c", "o1", "a", T0, document='{"amount": 1}', object_type="t"), rules=rules)
    assert ok.accepted
    for doc in ('{}', '{"amount": "one"}', '{"amount": 100000000000000000000}'):  # null > 0; string > int; > int64
        outcome = decide(None, CreateObject("c", "o1", "a", T0, document=doc, object_type="t"), rules=rules).outcome
        assert isinstance(outcome, Rejection) and outcome.reason is ReasonCode.RULE_ERROR, (doc, outcome)
        assert outcome.rule == "t:positive" and "evaluation failed" in (outcome.rule_message or "")


def test_guards_run_on_the_kinds_they_name_after_the_generic_checks() -> None:
    rules = with_rules({"rules": 1, "types": {"t": {"guards": [
        {"name": "no-editors", "expr": "command.editor == ''", "message": "no editors", "kinds": ["grant_editor"]}]}}})
    state = decide(None, CreateObject("c", "o1", "alice", T0, document="{}", object_type="t"), rules=rules).state
    assert state is not None
    grant = decide(state, GrantEditor("g", "o1", "alice", T0, editor="bob"), rules=rules).outcome
    assert isinstance(grant, Rejection) and grant.rule == "t:no-editors"
    not_owner = decide(state, GrantEditor("g", "o1", "mallory", T0, editor="bob"), rules=rules).outcome
    assert isinstance(not_owner, Rejection) and not_owner.reason is ReasonCode.NOT_FOUND  # generic checks first
    assert decide(state, DeleteObject("d", "o1", "alice", T0), rules=rules).accepted


def test_guards_see_the_caller_the_command_and_the_state() -> None:
    rules = with_rules({"rules": 1, "types": {"t": {"tracked": {"n": "/n"}, "guards": [{
        "name": "all", "kinds": ["create", "update"], "message": "m", "expr":
        "caller.principal == 'alice' && caller.issuer == 'https://idp' && command.object_id == 'o1' && "
        "command.issued_at > timestamp('2025-01-01T00:00:00Z') && (command.kind == 'create' ? "
        "command.document.n == 1 && state.version == 0 && !state.exists : "
        "command.patch.n == state.n + 1 && state.owner == 'alice' && state.created_at < command.issued_at)"}]}}})
    first = decide(None, CreateObject("c", "o1", "alice", T0, document='{"n": 1}', object_type="t",
                                      issuer="https://idp"), rules=rules)
    assert first.accepted and first.state is not None
    assert decide(first.state, replace_patch({"n": 2}), rules=rules).accepted
    assert not decide(first.state, replace_patch({"n": 3}), rules=rules).accepted


def replace_patch(patch: dict[str, Any]) -> Any:  # noqa: ANN401
    from datetime import timedelta

    from commands import UpdateObject

    return UpdateObject("u", "o1", "alice", T0 + timedelta(seconds=1), patch=json.dumps(patch), issuer="https://idp")


def test_tracked_fields_follow_merge_patch_semantics() -> None:
    rules = with_rules({"rules": 1, "types": {"t": {"tracked": {"deep": "/a/b", "obj": "/o", "later": "/l"}}}})
    state = decide(None, CreateObject("c", "o1", "alice", T0, document=json.dumps(
        {"a": {"b": 1, "c": 2}, "o": {"x": 1, "y": {"z": 1}}}), object_type="t"), rules=rules).state
    assert state is not None
    steps: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"a": {"c": 3}}, {"/a/b": 1, "/o": {"x": 1, "y": {"z": 1}}}),  # untouched path keeps its value
        ({"o": {"y": {"z": None, "w": 2}, "x": None}}, {"/a/b": 1, "/o": {"y": {"w": 2}}}),  # objects merge
        ({"a": 5}, {"/o": {"y": {"w": 2}}}),  # a scalar at a prefix replaces it: /a/b is gone
        ({"a": {"b": {"k": [1, None]}}}, {"/a/b": {"k": [1, None]}, "/o": {"y": {"w": 2}}}),  # arrays whole
        ({"o": None, "l": "set"}, {"/a/b": {"k": [1, None]}, "/l": "set"}),  # null deletes
    ]
    for patch, expected in steps:
        decision = update(state, patch, rules)
        assert decision.accepted and decision.state is not None
        state = decision.state
        assert json.loads(state.tracked or "{}") == expected, patch


def test_over_the_tracked_bound_is_too_large_and_at_it_is_accepted() -> None:
    doc = {"rules": 1, "max_tracked_bytes": 20, "types": {"t": {"tracked": {"s": "/s"}}}}  # {"/s":"..."}: 9 + len
    rules = with_rules(doc)
    at = decide(None, CreateObject("c", "o1", "alice", T0, document=json.dumps({"s": "x" * 11}), object_type="t"),
                rules=rules)
    assert at.accepted and at.state is not None and len((at.state.tracked or "").encode()) == 20
    over = update(at.state, {"s": "x" * 12}, rules)
    assert isinstance(over.outcome, Rejection) and over.state is at.state
    assert (over.outcome.reason, over.outcome.rule, over.outcome.rule_pointers) == (
        ReasonCode.TOO_LARGE, "t:max_tracked_bytes", ("/s",))


def test_a_rule_rejection_fits_its_bounds() -> None:
    rules = with_rules({"rules": 1, "types": {"t": {"create_schema": {"properties": {"k" * 400: {"maxLength": 1}}}}}})
    outcome = decide(None, CreateObject("c", "o1", "a", T0, document=json.dumps({"k" * 400: "é" * 2000}),
                                        object_type="t"), rules=rules).outcome
    assert isinstance(outcome, Rejection) and outcome.rule == "t:create_schema"
    assert len((outcome.rule_message or "").encode()) <= MAX_MESSAGE_BYTES
    assert all(len(p.encode()) <= MAX_POINTER_BYTES for p in outcome.rule_pointers)
    assert len(outcome.message) <= 1001
    assert codec.decode_outcome(codec.encode_outcome(outcome)) == outcome


def test_the_order_example_document_is_the_issue_s() -> None:
    assert ORDER["status"] == "draft" and RULES.types["order"].transitions[0].initial == frozenset({"draft"})


@pytest.mark.parametrize(("exprs", "reason", "rule"), [
    (("true", "next.n > 0", "false"), ReasonCode.RULE_ERROR, "t:g1"),  # null > 0 errors before the false guard
    (("true", "false", "next.n > 0"), ReasonCode.RULE_VIOLATED, "t:g1"),  # the false guard comes first
    (("next.n > 0 || true", "true", "false"), ReasonCode.RULE_VIOLATED, "t:g2"),  # an absorbed error is no error
    (("true", "true", "next.n"), ReasonCode.RULE_ERROR, "t:g2"),  # not a bool
    (("true", "true", "true"), None, None),
])
def test_the_first_guard_that_is_not_true_decides(exprs: tuple[str, ...], reason: ReasonCode | None,
                                                  rule: str | None) -> None:
    rules = with_rules({"rules": 1, "types": {"t": {"tracked": {"n": "/n"}, "guards": [
        {"name": f"g{i}", "expr": e, "message": f"m{i}"} for i, e in enumerate(exprs)]}}})
    outcome = decide(None, CreateObject("c", "o1", "a", T0, document="{}", object_type="t"), rules=rules).outcome
    if reason is None:
        assert isinstance(outcome, Event)
    else:
        assert isinstance(outcome, Rejection) and (outcome.reason, outcome.rule) == (reason, rule), outcome


def test_a_state_whose_tracked_text_is_not_json_is_rule_error_not_an_exception() -> None:
    state = replace(created(), tracked="{not json")
    outcome = update(state, {"title": "t"}, RULES).outcome
    assert isinstance(outcome, Rejection) and (outcome.reason, outcome.rule) == (ReasonCode.RULE_ERROR, "types")


def test_a_field_set_before_its_state_machine_moves_only_to_an_initial_state() -> None:
    # An order created while the rules had no transition: its status is null, or a value that is no state. Once
    # the state machine is deployed, the first move must go to an `initial` state (draft), not to any state.
    before = with_rules({"rules": 1, "types": {"order": {"tracked": {"status": "/status"}}}})
    for status in (None, "legacy"):
        doc = {k: v for k, v in {**ORDER, "status": status}.items() if v is not None}
        made = decide(None, CreateObject("c", "o1", "alice", T0, document=json.dumps(doc), object_type="order"),
                      rules=before)
        assert made.accepted and made.state is not None, made.outcome
        state = made.state
        assert json.loads(state.tracked or "{}").get("/status") == status
        for jump in ("submitted", "approved", "rejected"):
            out = refused(state, update(state, {"status": jump}, RULES, groups=("finance",)), ReasonCode.RULE_VIOLATED,
                          "order:status-flow")
            assert out.rule_pointers == ("/status",)
        assert json.loads(moved(moved(state, {"status": "draft"}), {"status": "submitted"}).tracked or "")[
            "/status"] == "submitted"
        # with no `initial`, a field set before the rule may start at any state
        free = with_rules({"rules": 1, "types": {"order": {"tracked": {"status": "/status"}, "transitions": [
            {"name": "flow", "field": "status", "allowed": {"draft": ["submitted"], "submitted": []}}]}}})
        assert update(state, {"status": "submitted"}, free).accepted
