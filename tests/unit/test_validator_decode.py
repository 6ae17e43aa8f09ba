"""Pure parts of the validator: murmur2 as the Java client, record decoding, output routing, the per-key fold."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.settings import Settings
from app.validator.decode import to_command
from app.validator.fold import InputRecord, fold, limits_for
from app.validator.headers import ce_headers
from app.validator.murmur2 import murmur2, partition_for, positive_hashes
from app.validator.outputs import outcome_record
from commands import (
    CreateObject,
    Event,
    OriginalRecord,
    ReasonCode,
    Rejection,
    UpdateObject,
    decide,
    keep_original,
    reject_record,
)
from schemas import codec
from tests.unit.record_strategies import signature

pytestmark = pytest.mark.unit

AT = datetime(2025, 1, 1, tzinfo=UTC)
S = Settings(partitions=8, topic_events="ev", topic_rejections="rj", topic_commands="cmd")


@pytest.mark.parametrize(("data", "expected"), [
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"", 275646681),
])
def test_murmur2_matches_the_java_client(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_the_column_hash_equals_the_java_vectors_and_the_scalar_hash() -> None:
    vectors = [b"21", b"foobar", b"a-little-bit-long-string", b"a-little-bit-longer-string",
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", b"abc", b""]
    assert positive_hashes(vectors).tolist() == [murmur2(v) & 0x7FFFFFFF for v in vectors]


@given(st.lists(st.binary(max_size=80), max_size=60))
def test_the_column_hash_equals_the_scalar_hash_for_any_keys_of_any_lengths(keys: list[bytes]) -> None:
    assert positive_hashes(keys).tolist() == [murmur2(k) & 0x7FFFFFFF for k in keys]


def test_partition_is_positive_masked() -> None:
    assert partition_for(b"foobar", 50) == ((-790332482) & 0x7FFFFFFF) % 50
    assert all(0 <= partition_for(f"k{i}".encode(), 7) < 7 for i in range(200))


def _create(obj: str = "o1", cid: str = "c1") -> CreateObject:
    return CreateObject(cid, obj, "alice", AT, document="{}")


def test_a_good_record_decodes_to_its_command() -> None:
    cmd = _create()
    key = b"o1"
    assert to_command(key, codec.encode_command(cmd), "cmd", partition_for(key, 8), 3, partitions=8) == cmd


@pytest.mark.parametrize(("key", "value", "reason"), [
    (b"o1", None, ReasonCode.MALFORMED),
    (b"o1", b"", ReasonCode.MALFORMED),
    (b"o1", b"\x01\x00\x00\x03\xe9abc", ReasonCode.MALFORMED),                 # bad magic
    (b"o1", b"\x00\x00\x00\x00\x07abc", ReasonCode.UNSUPPORTED_SCHEMA),       # unknown schema id
    (b"o1", codec.encode_event(decide(None, _create()).outcome), ReasonCode.UNSUPPORTED_SCHEMA),  # not a command
    (b"o1", codec.encode_command(_create())[:-3], ReasonCode.MALFORMED),     # truncated
    (b"other", codec.encode_command(_create()), ReasonCode.MALFORMED),       # key is not the object id
    (None, codec.encode_command(_create()), ReasonCode.MALFORMED),
])
def test_bad_records_become_rejections_keeping_bytes_and_coordinates(key, value, reason) -> None:  # noqa: ANN001
    out = to_command(key, value, "cmd", 5, 42)
    assert isinstance(out, Rejection)
    assert out.reason == reason
    assert out.original == keep_original("cmd", 5, 42, key, value)
    assert "cmd[5]@42" in out.message


def test_a_record_on_the_wrong_partition_is_misrouted() -> None:
    key = b"o1"
    wrong = (partition_for(key, 8) + 1) % 8
    out = to_command(key, codec.encode_command(_create()), "cmd", wrong, 0, partitions=8)
    assert isinstance(out, Rejection) and out.reason == ReasonCode.MISROUTED and out.object_id == "o1"
    assert not isinstance(to_command(key, codec.encode_command(_create()), "cmd", wrong, 0), Rejection)


def test_outcome_records_route_by_type_and_keep_the_partition() -> None:
    ev = decide(None, _create()).outcome
    assert isinstance(ev, Event)
    assert outcome_record(ev, S, 3) == ("ev", b"o1", codec.encode_event(ev), 3, ce_headers(ev, S.topic_commands))
    rej = reject_record(OriginalRecord("cmd", 2, 9, b"\xffraw", b"junk"), ReasonCode.MALFORMED, "bad")
    assert outcome_record(rej, S, 2) == ("rj", b"\xffraw", codec.encode_rejection(rej), 2, ce_headers(rej, S.topic_commands))
    rej_none = reject_record(OriginalRecord("cmd", 2, 9, None, b"junk"), ReasonCode.MALFORMED, "bad")
    assert outcome_record(rej_none, S, 2)[1] is None


def test_fold_sorts_by_offset_and_never_loads_state_for_poison() -> None:
    key = b"o1"
    p = partition_for(key, 8)
    create, update = _create(), UpdateObject("u1", "o1", "alice", AT, patch='{"a": 1}')
    loads = []

    def load():  # noqa: ANN202
        loads.append(1)

    u, c = codec.encode_command(update), codec.encode_command(create)
    recs = [InputRecord(key, u, "cmd", p, 7, signature(key, u)),
            InputRecord(key, b"junk", "cmd", p, 6),
            InputRecord(key, c, "cmd", p, 5, signature(key, c))]
    out, state, changed = fold(load, recs, S)
    assert changed and state is not None and state.version == 2 and loads == [1]
    decoded = [codec.decode_outcome(v) for _, _, v, _, _ in out]
    assert [type(d).__name__ for d in decoded] == ["Event", "Rejection", "Event"]
    assert [d.version for d in decoded if isinstance(d, Event)] == [1, 2]

    loads.clear()
    out, state, changed = fold(load, [InputRecord(key, b"junk", "cmd", p, 1)], S)
    assert not changed and state is None and loads == [] and len(out) == 1


def test_limits_carry_the_dedup_ttl() -> None:
    assert limits_for(S.model_copy(update={"dedup_ttl_ms": 1500})).dedup_ttl.total_seconds() == 1.5


def test_a_command_without_a_genuine_signature_is_unauthenticated_unless_unsigned_producers_are_allowed() -> None:
    from pydantic import SecretStr

    from app.signing import checker_for, signer_for

    cmd = CreateObject("c", "o", "alice", datetime(2025, 1, 1, tzinfo=UTC), document="{}")
    key, value = b"o", codec.encode_command(cmd)
    p = partition_for(key, S.partitions)
    checker = checker_for(S)
    assert checker is not None

    def decoded(sig: bytes | None, check: object = checker) -> object:
        return to_command(key, value, "cmd", p, 3, partitions=S.partitions, signature=sig, checker=check)  # type: ignore[arg-type]

    assert decoded(signature(key, value)) == cmd
    for sig in (None, b"", b"derived:AAAA", b"nokid", b"other:" + signature(key, value).split(b":")[1],
                signature(b"p", value), signature(key, value + b" ")):
        rej = decoded(sig)
        assert isinstance(rej, Rejection) and rej.reason is ReasonCode.UNAUTHENTICATED, sig
        assert rej.original is not None and (rej.original.offset, rej.original.value) == (3, value)
    assert decoded(None, checker_for(S.model_copy(update={"allow_unsigned_commands": True}))) == cmd
    # rotation with overlap: the new key signs, a record signed with the old one is still genuine
    old = S.model_copy(update={"record_keys": {"k1": SecretStr("a" * 32)}})
    both = S.model_copy(update={"record_keys": {"k1": SecretStr("a" * 32), "k2": SecretStr("b" * 32)},
                                "record_key_id": "k2"})
    assert signer_for(both).sign(key, value).startswith(b"k2:")
    assert decoded(signer_for(old).sign(key, value), signer_for(both)) == cmd
    assert isinstance(decoded(signer_for(old).sign(key, value), signer_for(
        S.model_copy(update={"record_keys": {"k2": SecretStr("b" * 32)}}))), Rejection)  # k1 retired


def test_the_record_signature_is_the_documented_hmac_so_records_signed_by_any_release_still_verify() -> None:
    """``app.signing``'s format: base64url (unpadded) HMAC-SHA256 over domain tag, 4-byte key length, key, value."""
    import base64
    import hashlib
    import hmac

    from pydantic import SecretStr

    from app.signing import signer_for

    settings = S.model_copy(update={"record_keys": {"k1": SecretStr("s" * 32)}})
    for key, value in ((b"o", b"v"), (None, b"v"), (b"", b""), (b"\x00" * 300, b"x" * 70_000)):
        head = b"\xff\xff\xff\xff" if key is None else len(key).to_bytes(4, "big") + key
        mac = hmac.new(b"s" * 32, b"arbiter-command-record-v1\x00" + head + value, hashlib.sha256).digest()
        assert signer_for(settings).sign(key, value) == b"k1:" + base64.urlsafe_b64encode(mac).rstrip(b"=")
