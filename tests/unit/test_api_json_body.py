"""Request bodies: RFC 8259 JSON that Arbiter can store and serve back, or a 400/422 ApiError, never a crash."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.json_body import ENVELOPE_DEPTH, parse_body
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


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=30))
def test_what_json_dumps_writes_is_accepted_unchanged(value: object) -> None:
    body = json.dumps({"document": {"v": value}}).encode()
    assert parse_body(body) == {"document": {"v": value}}
