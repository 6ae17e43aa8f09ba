"""The audit hash chain's entry layout and links; pure."""

from __future__ import annotations

import pytest

from projections.audit.chain import (
    GENESIS,
    Entry,
    Head,
    entry_key,
    head_key,
    link,
    pack_entry,
    pack_head,
    parse_chain_key,
    unpack_entry,
    unpack_head,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("key", "value"), [(b"k", b"v\x00"), (None, b""), (b"", None), (None, None)])
def test_entry_round_trips_with_its_hash(key: bytes | None, value: bytes | None) -> None:
    e = Entry("events-x", 0, 7, 123, 1_700_000_000_000, key, value)
    h = link(GENESIS, e)
    stored, back = unpack_entry(entry_key("events-x", 0, 7), pack_entry(h, e))
    assert (stored, back) == (h, e)


def test_every_field_and_the_predecessor_feed_the_hash() -> None:
    e = Entry("t", 1, 0, 5, 9, b"k", b"value")
    h = link(GENESIS, e)
    variants = [Entry("u", 1, 0, 5, 9, b"k", b"value"), Entry("t", 2, 0, 5, 9, b"k", b"value"),
                Entry("t", 1, 1, 5, 9, b"k", b"value"), Entry("t", 1, 0, 6, 9, b"k", b"value"),
                Entry("t", 1, 0, 5, 8, b"k", b"value"), Entry("t", 1, 0, 5, 9, None, b"value"),
                Entry("t", 1, 0, 5, 9, b"k", b"valuf"), Entry("t", 1, 0, 5, 9, b"kv", b"alue")]
    assert len({h, *(link(GENESIS, v) for v in variants)}) == len(variants) + 1
    assert link(b"\x01" * 32, e) != h


def test_keys_parse_back_even_with_zero_bytes_in_partition_and_seq() -> None:
    assert parse_chain_key(entry_key("events", 0, 0)) == ("events", 0)
    assert parse_chain_key(entry_key("ev-ents", 256, 1 << 40)) == ("ev-ents", 256)
    assert parse_chain_key(head_key("rejections", 0)) == ("rejections", 0)
    assert unpack_head(pack_head(Head(b"\x02" * 32, 4, 99))) == Head(b"\x02" * 32, 4, 99)


def test_a_malformed_entry_is_a_value_error() -> None:
    e = Entry("t", 0, 0, 1, 2, b"k", b"v")
    raw = pack_entry(link(GENESIS, e), e)
    with pytest.raises(ValueError, match="length"):
        unpack_entry(entry_key("t", 0, 0), raw + b"x")
    with pytest.raises(ValueError, match="shorter"):
        unpack_entry(entry_key("t", 0, 0), raw[:10])


def test_the_audit_history_names_the_token_that_sent_each_command() -> None:
    """Events and rejections carry the issuer and jti the API copied into the command (issue 27)."""
    from datetime import UTC, datetime

    from commands import CreateObject, UpdateObject, decide
    from projections.audit.chain import Entry
    from projections.audit.verify import _history_entry
    from schemas import codec

    at = datetime(2025, 1, 1, tzinfo=UTC)
    create = CreateObject("c1", "o", "alice", at, document="{}", issuer="https://idp/realms/a", jti="j-1")
    made = decide(None, create)
    refused = decide(made.state, UpdateObject("u1", "o", "mallory", at, patch="{}", issuer="urn:arbiter:local",
                                              jti="j-2")).outcome
    seen = [_history_entry(Entry("t", 0, i, i, 0, b"o", value))
            for i, value in enumerate([codec.encode_event(made.outcome), codec.encode_rejection(refused)])]  # type: ignore[arg-type]
    assert [(h.outcome, h.issuer, h.jti) for h in seen] == [("ACCEPTED", "https://idp/realms/a", "j-1"),
                                                            ("REJECTED", "urn:arbiter:local", "j-2")]
    assert "token=https://idp/realms/a#j-1" in str(seen[0])
