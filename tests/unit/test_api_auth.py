"""Bearer tokens: only a token signed with the secret, unexpired and well formed, yields its principal."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.auth import Unauthorized, issue_token, verify_token

pytestmark = pytest.mark.unit

SECRET = "s3cret"


def test_round_trip_gives_the_principal() -> None:
    assert verify_token(SECRET, issue_token(SECRET, "alice@example", 60)) == "alice@example"


def test_other_secret_expired_and_tampered_tokens_are_refused() -> None:
    tok = issue_token(SECRET, "alice", 60, now=1000)
    with pytest.raises(Unauthorized, match="signature"):
        verify_token("other", tok, now=1000)
    with pytest.raises(Unauthorized, match="expired"):
        verify_token(SECRET, tok, now=1060)
    payload, sig = tok.split(".")
    forged = base64.urlsafe_b64encode(json.dumps({"sub": "root", "iat": 1000, "exp": 9e9}).encode()).rstrip(b"=")
    with pytest.raises(Unauthorized, match="signature"):
        verify_token(SECRET, f"{forged.decode()}.{sig}", now=1000)
    with pytest.raises(Unauthorized):
        verify_token(SECRET, payload, now=1000)


def test_principal_must_be_a_plain_name() -> None:
    with pytest.raises(Exception, match="does not match"):
        issue_token(SECRET, "a b", 60)


@given(st.text(max_size=200))
def test_garbage_is_unauthorized_never_another_error(garbage: str) -> None:
    with pytest.raises(Unauthorized):
        verify_token(SECRET, garbage)
