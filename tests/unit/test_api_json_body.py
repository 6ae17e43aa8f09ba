"""Request bodies: RFC 8259 JSON that Arbiter can store and serve back, or a 400/422 ApiError, never a crash."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.http.json_body import ENVELOPE_DEPTH, parse_body
from app.api.models import CreateRequest
from app.api.problems import ApiError, status_of
from commands.json_text import DEFAULT_MAX_DEPTH, object_problem

pytestmark = pytest.mark.unit


def nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.parametrize("body", [
    b'{"document": {"x": NaN}}', b'{"document": {"x": Infinity}}', b'{"document": {"x": -Infinity}}',
    b'{"document": {"x": 1e400}}', b'{"document": {"x": -1e400}}', b'{"document": {"x": "\\ud800"}}',
    b'{"document": {"\\udfff": 1}}', b'{"\\ud800": 1}', b'{"document": {"x": ["a\\udc00b"]}}',
    b'{"document": {"x": ' + b"9" * 5000 + b"}}",
    nested(DEFAULT_MAX_DEPTH + ENVELOPE_DEPTH + 1).encode(), b"[" * 100_000 + b"]" * 100_000,
])
def test_not_rfc8259_is_422(body: bytes) -> None:
    with pytest.raises(ApiError) as e:
        parse_body(body)
    assert e.value.code == "INVALID_REQUEST" and status_of(e.value.code) == 422
    json.dumps(e.value.extra, allow_nan=False).encode("utf-8")  # the problem itself is valid JSON
    assert object_problem(body.decode("utf-8", "replace")) is not None  # the validator refuses the same text


@pytest.mark.parametrize("body", [b'{"document": {', b"\xff\xfe{}", b'{"a": 1} x', b"", b"\xef\xbb\xbf{}"])
def test_not_json_at_all_is_400(body: bytes) -> None:
    with pytest.raises(ApiError) as e:
        parse_body(body)
    assert e.value.code == "INVALID_JSON" and status_of(e.value.code) == 400


def test_documents_are_held_to_the_validators_depth_exactly() -> None:
    deepest = json.loads(nested(DEFAULT_MAX_DEPTH))
    assert CreateRequest.model_validate({"document": deepest}).document == deepest
    assert object_problem(nested(DEFAULT_MAX_DEPTH)) is None
    with pytest.raises(ValueError, match="nesting deeper than 32"):
        CreateRequest.model_validate({"document": json.loads(nested(DEFAULT_MAX_DEPTH + 1))})
    assert object_problem(nested(DEFAULT_MAX_DEPTH + 1)) is not None


# U+0000 and lone surrogates are refused (no read model can store them): see the tests below and
# test_domain_rules.test_lone_surrogate_is_malformed.
_TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)))


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | _TEXT, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
                    max_leaves=30))
def test_what_json_dumps_writes_is_accepted_unchanged(value: object) -> None:
    body = json.dumps({"document": {"v": value}}).encode()
    assert parse_body(body) == {"document": {"v": value}}


@pytest.mark.parametrize("document", ['{"n": "a\\u0000b"}', '{"k\\u0000": 1}', '{"a": [{"b": ["\\u0000"]}]}'])
def test_u0000_in_a_string_or_a_key_is_refused_by_the_api_the_validator_and_the_read_model_alike(document: str) -> None:
    """One rule (commands.json_text): what the API lets through, PostgreSQL's jsonb can store."""
    from commands import CreateObject, ReasonCode, decide
    from commands.event import Event, EventType
    from projections.db.apply import Status, apply_event

    with pytest.raises(ApiError) as refused:
        parse_body(b'{"document": ' + document.encode() + b"}")
    assert refused.value.code == "INVALID_REQUEST" and "U+0000" in refused.value.message
    assert "U+0000" in (object_problem(document) or "")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    decision = decide(None, CreateObject("c", "o", "alice", at, document=document))
    assert decision.outcome.reason is ReasonCode.MALFORMED and "U+0000" in decision.outcome.message  # type: ignore[union-attr]
    applied = apply_event(None, Event("e", EventType.CREATED, "o", 1, "c", "alice", at, "alice", document))
    assert applied.status is Status.INVALID and "U+0000" in applied.detail


def test_an_escaped_backslash_then_u0000_is_text_not_u0000() -> None:
    assert object_problem('{"path": "C:\\\\u0000"}') is None
    assert parse_body(b'{"path": "C:\\\\u0000"}') == {"path": "C:\\u0000"}


@pytest.mark.parametrize("field", ["object_id", "principal", "reader"])
def test_u0000_in_an_id_is_malformed(field: str) -> None:
    from commands import CreateObject, GrantReader, ReasonCode, decide

    at = datetime(2026, 1, 1, tzinfo=UTC)
    ids = {"object_id": "o", "principal": "alice", "reader": "bob"} | {field: "x\x00y"}
    state = decide(None, CreateObject("c0", ids["object_id"], ids["principal"], at, document="{}")).state
    cmd = GrantReader("c1", ids["object_id"], ids["principal"], at, reader=ids["reader"])
    decision = decide(state, cmd)
    assert decision.outcome.reason is ReasonCode.MALFORMED and "U+0000" in decision.outcome.message  # type: ignore[union-attr]
