"""The size chain of ``app.limits``: arithmetic, and worst-case records encoded by the real codec fit it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from app import limits
from app.limits import (
    FRAME_BYTES,
    HEADERS_BYTES,
    LIBRDKAFKA_RECORD_OVERHEAD,
    MARGIN_BYTES,
    LimitsTooSmall,
    avro_max_size,
    clip_utf8,
    headers_size,
    size_limits,
    varint_size,
)
from app.settings import Settings
from app.signing import signer_for
from app.traces import TRACESTATE_BYTES, trace_headers
from app.validator.decode import to_command
from app.validator.fold import limits_for
from app.validator.murmur2 import partition_for
from app.validator.outputs import OutputRecord, outcome_record, record_size
from commands import (
    CreateObject,
    DeleteObject,
    Event,
    GrantReader,
    ObjectState,
    ReasonCode,
    Rejection,
    RuleWarning,
    UpdateObject,
    decide,
)
from commands.rules import bounds, compile_rules
from commands.rules.bounds import MAX_NAME_BYTES
from schemas import codec

pytestmark = pytest.mark.unit

M = 1024 * 1024
S = Settings(partitions=8, topic_events="ev", topic_rejections="rj", topic_commands="cmd")
FAR = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)  # the longest timestamp varint a datetime can give


def java_batch_upper_bound(key: bytes | None, value: bytes, headers: tuple[tuple[str, bytes], ...] = ()) -> int:
    """What the Java producer checks against max.request.size for one record (estimateSizeInBytesUpperBound)."""
    k = -1 if key is None else len(key)
    key_part = 1 if key is None else varint_size(k) + k
    return 61 + 21 + key_part + varint_size(len(value)) + len(value) + varint_size(len(headers)) + headers_size(headers)


def utf8_id(n_bytes: int, tag: str = "") -> str:
    """Return an id of exactly ``n_bytes`` UTF-8 bytes, mostly 4-byte characters (the worst case per character)."""
    head = tag + "\U0001f600" * ((n_bytes - len(tag.encode())) // 4)
    text = head + "x" * (n_bytes - len(head.encode()))
    assert len(text.encode()) == n_bytes
    return text


def utf8_object(n_bytes: int) -> str:
    """Return the JSON text of an object of exactly ``n_bytes`` UTF-8 bytes, mostly 4-byte characters."""
    return '{"a":"' + utf8_id(n_bytes - 8) + '"}'


def test_the_default_chain() -> None:
    sizes = size_limits(M)
    assert FRAME_BYTES == 61 + 21 + 5 + 5 + 1 == 93
    assert sizes.max_record_bytes == M - 93 - 2048 - 1024 == 1_045_411
    # output headers; events carry issuer and jti; and object_type (union 1 + length 2 + 64) and rules_version (1 + 10)
    # and up to 4 warnings (array count 1 + end 1, each: rule 2 + 129, mode 1 + 16, reason 1 + 32, message 2 + 1024,
    # pointers 1 + 16 * (2 + 256) + 1)
    assert sizes.max_document_bytes == 1_046_101 - 2048 - 390 - 78 - (2 + 4 * (131 + 17 + 33 + 1026 + 4130))
    assert sizes.keep_bytes == 64 * 1024
    assert sizes.max_id_bytes == 256
    assert limits_for(S).max_document_bytes == sizes.max_document_bytes
    assert limits_for(S).max_id_bytes == 256


def test_every_client_is_configured_from_the_one_setting() -> None:
    s = S.model_copy(update={"max_message_bytes": 8 * M})
    sizes = limits.for_settings(s)
    assert limits.topic_config(s) == {"max.message.bytes": str(8 * M)}
    assert limits.sink_options(s)["kafka.max.request.size"] == str(8 * M + limits.PARKED_MARGIN_BYTES)
    assert limits.topic_config(s, s.parked_topic) == {"max.message.bytes": str(8 * M + limits.PARKED_MARGIN_BYTES)}
    assert int(limits.sink_options(s)["kafka.buffer.memory"]) >= 2 * 8 * M
    assert int(limits.source_options(s)["kafka.max.partition.fetch.bytes"]) >= 8 * M
    assert int(limits.source_options(s)["kafka.fetch.max.bytes"]) >= 8 * M
    assert int(limits.consumer_config(s)["fetch.message.max.bytes"]) >= 8 * M
    assert int(limits.consumer_config(s)["fetch.max.bytes"]) >= 8 * M
    assert limits.api_producer_config(s)["message.max.bytes"] == sizes.max_record_bytes + LIBRDKAFKA_RECORD_OVERHEAD \
        + limits.SIGNATURE_HEADER_BYTES  # the record's one header, its signature, on top of key + value
    assert limits.api_producer_config(s, traced=True)["message.max.bytes"] == \
        limits.api_producer_config(s)["message.max.bytes"] + limits.TRACE_HEADERS_BYTES  # and the trace context
    assert sizes.max_document_bytes > size_limits(M).max_document_bytes


@pytest.mark.parametrize("m", [64 * 1024, 100_000, M, 8 * M, 64 * M])
def test_limits_fit_inside_each_other(m: int) -> None:
    sizes = size_limits(m)
    assert 0 < sizes.max_document_bytes < sizes.max_record_bytes < m
    assert 1024 <= sizes.keep_bytes <= 64 * 1024
    # The record bound keeps the Java producer's own check (and so the broker's batch check) satisfied.
    assert java_batch_upper_bound(b"k" * 10, b"v" * (sizes.max_record_bytes - 10)) <= m - 1024
    # Each bound is the largest that fits: one more byte of document or kept bytes would not.
    d, k = sizes.max_document_bytes, sizes.keep_bytes
    assert max(limits.event_record_size(d + 1, 256), limits.command_record_size(d + 1, 256)) > sizes.max_record_bytes
    assert k == 64 * 1024 or limits.rejection_record_size(k + 1, 256) > sizes.max_record_bytes


def test_too_small_a_message_size_is_refused() -> None:
    with pytest.raises(LimitsTooSmall):
        size_limits(4096)
    with pytest.raises(ValueError, match="max_message_bytes"):
        Settings(max_message_bytes=1000)


def test_a_string_field_without_a_bound_is_an_error() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"},
                                                        {"name": "s", "type": ["null", "string"]}]}
    assert avro_max_size(schema, {"s": 300}) == 10 + 1 + 2 + 300
    with pytest.raises(KeyError):
        avro_max_size(schema, {})


def test_varints() -> None:
    assert [varint_size(n) for n in (0, 63, 64, 8191, 8192, 2**63 - 1, -(2**63))] == [1, 1, 2, 2, 3, 10, 10]


def test_clip_utf8_keeps_short_text_and_cuts_on_a_character_boundary() -> None:
    assert clip_utf8("short", 256) == "short"
    exact = utf8_id(256)
    assert clip_utf8(exact, 256) == exact
    long = "\U0001f600" * 100  # 400 bytes
    clipped = clip_utf8(long, 256)
    assert len(clipped.encode()) <= 256 and clipped.endswith("…") and clipped[:-1] == "\U0001f600" * 63


#: The largest trace context the API stores on a command and the validator copies onto its output (app.traces).
WORST_TRACE = trace_headers(b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01", b"k=" + b"v" * (TRACESTATE_BYTES - 2))
assert len(WORST_TRACE) == 2


def _worst_state(ids: int) -> ObjectState:
    owner = utf8_id(ids, "owner")
    return ObjectState(exists=True, deleted=False, version=2**63 - 2, owner=owner, editors=(utf8_id(ids, "ed"),))


def _fits(record: OutputRecord, m: int) -> None:
    sizes = size_limits(m)
    assert record_size(record) <= sizes.max_record_bytes
    assert headers_size(record[4]) <= HEADERS_BYTES
    assert java_batch_upper_bound(record[1], record[2], record[4]) <= m - MARGIN_BYTES  # the margin stays slack


@pytest.mark.parametrize("m", [64 * 1024, M])
def test_the_worst_case_events_fit_and_one_byte_more_is_too_large(m: int) -> None:
    s = S.model_copy(update={"max_message_bytes": m, "topic_commands": "c" * 249})  # the longest ce_source header
    lim = limits_for(s)
    sizes = size_limits(m)
    d, ids = sizes.max_document_bytes, lim.max_id_bytes
    oid, cid, who = utf8_id(ids, "obj"), utf8_id(ids, "cmd"), utf8_id(ids, "who")

    token = {"issuer": "i" * limits.ISSUER_BYTES, "jti": "j" * limits.JTI_BYTES}  # events carry both (issue 27)
    create = CreateObject(cid, oid, who, FAR, expected_version=0, document=utf8_object(d), **token,
                          object_type="t" * MAX_NAME_BYTES)
    assert create.size == d
    rules = compile_rules(json.dumps({"rules": 1, "types": {"t" * MAX_NAME_BYTES: {}}}), version=1)
    ev = decide(None, create, lim, rules).outcome
    assert isinstance(ev, Event) and ev.object_type == "t" * MAX_NAME_BYTES
    ev = replace(ev, rules_version=-(2**63))  # the longest rules version: 10 bytes as a zig-zag varint
    # and the most warnings, each at its bounds (rules in warn or audit mode that would have refused it)
    worst = RuleWarning("r" * bounds.MAX_RULE_BYTES, "m" * bounds.MAX_MODE_BYTES, "R" * bounds.MAX_REASON_BYTES,
                        "x" * bounds.MAX_MESSAGE_BYTES,
                        tuple("/" + "p" * (bounds.MAX_POINTER_BYTES - 1) for _ in range(bounds.MAX_POINTERS)))
    ev = replace(ev, warnings=(worst,) * bounds.MAX_WARNINGS)
    rec = outcome_record(ev, s, 3, WORST_TRACE)
    _fits(rec, m)
    assert record_size(rec) > sizes.max_record_bytes - 32  # the bound is tight, not a guess far below the limit

    state = _worst_state(ids)
    update = UpdateObject(cid, oid, state.owner, FAR, expected_version=2**63 - 2, patch=utf8_object(d), **token)
    ev = decide(state, update, lim).outcome
    assert isinstance(ev, Event) and ev.version == 2**63 - 1
    _fits(outcome_record(ev, s, 3, WORST_TRACE), m)

    grant = GrantReader(cid, oid, state.owner, FAR, reader=utf8_id(ids, "rd"), **token)
    ev = decide(state, grant, lim).outcome
    assert isinstance(ev, Event)
    _fits(outcome_record(ev, s, 3, WORST_TRACE), m)

    # The command itself passes the API producer's check and fits the topic.
    value = codec.encode_command(create)
    header = len(signer_for(s).sign(oid.encode(), value)) + len("arbiter-signature") + 2
    assert header <= limits.SIGNATURE_HEADER_BYTES
    trace = sum(len(k) + len(v) + 2 * 5 for k, v in WORST_TRACE)  # the write's trace context, varints at most 5
    assert trace == limits.TRACE_HEADERS_BYTES and header + trace < MARGIN_BYTES  # what the margin must hold
    assert len(oid.encode()) + len(value) + LIBRDKAFKA_RECORD_OVERHEAD + header + trace <= \
        limits.api_producer_config(s, traced=True)["message.max.bytes"]

    over = CreateObject(cid, oid, who, FAR, document=utf8_object(d + 1), **token)
    rej = decide(None, over, lim).outcome
    assert isinstance(rej, Rejection) and rej.reason is ReasonCode.TOO_LARGE
    _fits(outcome_record(rej, s, 3, WORST_TRACE), m)


@pytest.mark.parametrize("m", [64 * 1024, M])
def test_the_rejection_of_any_record_on_the_topic_fits(m: int) -> None:
    """Whatever a producer put on the commands topic (up to the topic's maximum), its rejection fits."""
    s = S.model_copy(update={"max_message_bytes": m, "topic_commands": "c" * 249})
    sizes = size_limits(m)
    biggest = m - 72  # key + value of the largest record a broker takes into a topic of max.message.bytes=m
    topic = "t" * 249
    cases = [
        (b"k" * 16, bytes(range(256)) * (biggest // 256 - 1)),        # garbage of ~the maximum size
        (b"\xff" * (biggest // 2), b"\x00" * (biggest // 2)),          # a huge key too
        (b"\xff" * (biggest - 10), None),                               # a huge key and no value
    ]
    # A command whose object id is the (huge) key but which names another object; and one on a wrong partition.
    big = utf8_id(biggest // 2 - 200, "o")
    cmd = DeleteObject("c", big, "p", FAR)
    cases.append((b"x" * (biggest // 2 - 200), codec.encode_command(cmd)))
    cases.append((big.encode(), codec.encode_command(cmd)))
    for key, value in cases:
        wrong = (partition_for(key, 8) + 1) % 8
        out = to_command(key, value, topic, wrong, 2**63 - 1, partitions=8, keep=sizes.keep_bytes)
        assert isinstance(out, Rejection), out
        assert out.original is not None and out.original.value_length == (None if value is None else len(value))
        assert out.original.key_sha256 == hashlib.sha256(key).hexdigest()
        assert len(out.message) <= limits.MESSAGE_CHARS + 1
        _fits(outcome_record(out, s, 2**31 - 1, WORST_TRACE), m)


def test_min_offsets_per_trigger_reaches_the_source_but_not_an_available_now_drain() -> None:
    from app.validator.source import source_options

    s = Settings(min_offsets_per_trigger=100, max_trigger_delay_ms=250)
    assert source_options(s)["minOffsetsPerTrigger"] == "100" and source_options(s)["maxTriggerDelay"] == "250ms"
    assert "minOffsetsPerTrigger" not in source_options(s, available_now=True)  # a drain must not wait for a batch
    assert "minOffsetsPerTrigger" not in source_options(Settings())
