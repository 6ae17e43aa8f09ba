"""The hand-compiled codecs write exactly fastavro's bytes and read exactly what fastavro reads."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commands import (
    ObjectState,
    ReasonCode,
    RecentCommand,
)
from schemas import binary, codec, records
from schemas.catalog import COMMAND, EVENT, REJECTION, STATE, SchemaCatalog
from schemas.codec import DecodeError
from tests.unit.record_strategies import record_strategies

pytestmark = pytest.mark.unit

CATALOG = SchemaCatalog.repository()
texts = st.text(max_size=80)  # past 63 characters a string's length takes two bytes
times = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),  # noqa: DTZ001
                     timezones=st.just(UTC))
longs = st.integers(-(2**63), 2**63 - 1)
RECORDS = record_strategies(texts, times, longs, max_editors=40, max_recent=20)
commands_st, events_st, states_st = RECORDS.commands, RECORDS.events, RECORDS.states
rejections_st = RECORDS.rejections

CASES: list[tuple[Any, str, Callable[[Any], bytes], Callable[[Any], records.Record], Callable[[bytes], Any]]] = [
    (commands_st, COMMAND, codec.encode_command, records.command_to_record, codec.decode_command),
    (events_st, EVENT, codec.encode_event, records.event_to_record, codec.decode_event),
    (states_st, STATE, codec.encode_state, records.state_to_record, codec.decode_state),
    (rejections_st, REJECTION, codec.encode_rejection, records.rejection_to_record, codec.decode_rejection),
]
IDS = ["command", "event", "state", "rejection"]


#: Rejection v4: what a rejection whose reason v4 has is written with (v5 only added reasons: issue 53).
REJECTION_V4 = next(v for v in CATALOG.versions() if v.subject == REJECTION and v.version == 4)
V4_REASONS = {s for f in REJECTION_V4.schema["fields"] if f["name"] == "reason" for s in f["type"]["symbols"]}


def fastavro_bytes(subject: str, record: records.Record) -> bytes:
    version = CATALOG.latest(subject)
    if subject == REJECTION and record["reason"] in V4_REASONS:
        version = REJECTION_V4
    buf = io.BytesIO()
    buf.write(b"\x00" + struct.pack(">I", version.schema_id))
    fastavro.schemaless_writer(buf, version.parsed, record)
    return buf.getvalue()


def fastavro_read(subject: str, data: bytes) -> records.Record:
    buf = io.BytesIO(data[5:])
    rec: records.Record = fastavro.schemaless_reader(buf, CATALOG.latest(subject).parsed, None)
    assert buf.tell() == len(data) - 5
    return rec


@pytest.mark.parametrize(("strategy", "subject", "encode", "to_record", "decode"), CASES, ids=IDS)
def test_compiled_bytes_are_fastavros(strategy, subject, encode, to_record, decode) -> None:  # type: ignore[no-untyped-def]
    @settings(max_examples=150, deadline=None)
    @given(strategy)
    def check(value: object) -> None:
        data = encode(value)
        assert data == fastavro_bytes(subject, to_record(value))
        assert decode(data) == value

    check()


@pytest.mark.parametrize(("subject", "decode", "from_record"), [
    (COMMAND, codec.decode_command, records.command_from_record),
    (EVENT, codec.decode_event, records.event_from_record),
    (STATE, codec.decode_state, records.state_from_record),
    (REJECTION, codec.decode_rejection, records.rejection_from_record),
], ids=IDS)
def test_whatever_compiled_decoders_accept_fastavro_reads_the_same(subject, decode, from_record) -> None:  # type: ignore[no-untyped-def]
    header = b"\x00" + struct.pack(">I", CATALOG.latest(subject).schema_id)

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=80))
    def check(body: bytes) -> None:
        try:
            value = decode(header + body)
        except DecodeError as e:
            assert e.reason is ReasonCode.MALFORMED
            return
        assert value == from_record(fastavro_read(subject, header + body))

    check()


def test_arrays_written_in_several_blocks_with_byte_sizes_are_read() -> None:
    # Other Avro writers may split arrays into blocks, and give a negative count followed by a byte size.
    state = ObjectState(True, False, 2, "o", ("a", "b", "c"), recent=(
        RecentCommand("c1", "ACCEPTED", 1, datetime(2025, 1, 1, tzinfo=UTC)),
        RecentCommand("c2", "ACCEPTED", 2, datetime(2025, 1, 2, tzinfo=UTC))))
    body = bytearray(codec.encode_state(state)[:5])
    body += b"\x01\x00"  # exists, not deleted
    binary.write_long(body, 2)
    binary.write_string(body, "o")
    body += b"\x04\x02a\x02b\x01\x04\x02c\x00"  # editors: 2 items, then -1 item of 2 bytes, then end
    body += b"\x00\x00\x00"  # created_at, updated_at, deleted_at: null
    binary.write_long(body, 0)
    for ids in (["c1", "c2"], ["ACCEPTED", "ACCEPTED"]):
        for s in ids:
            body += b"\x02"
            binary.write_string(body, s)
        body.append(0)
    body += b"\x02\x02\x02\x04\x00"  # versions: one block per item
    for day in (1, 2):
        body += b"\x02"
        binary.write_long(body, records.micros(datetime(2025, 1, day, tzinfo=UTC)))
    body.append(0)
    body += b"\x00\x00\x00"  # v2: readers, recent_principals, recent_fingerprints: empty (entries from v1)
    body += b"\x00\x00"  # v3: object_type, tracked: null
    expected = ObjectState(True, False, 2, "o", ("a", "b", "c"), recent=state.recent)
    assert codec.decode_state(bytes(body)) == expected == records.state_from_record(fastavro_read(STATE, bytes(body)))


@given(st.lists(longs, max_size=12))
@settings(max_examples=300, deadline=None)
def test_long_arrays_round_trip_through_every_path(values: list[int]) -> None:
    out = bytearray()
    binary.write_longs(out, values)
    reference = bytearray()
    if values:
        binary.write_long(reference, len(values))
        for v in values:
            binary.write_long(reference, v)
    reference.append(0)
    assert out == reference
    assert binary.read_longs(bytes(out), 0) == (values, len(out))


def test_recent_arrays_of_unequal_length_are_malformed() -> None:
    data = bytearray(codec.encode_state(ObjectState(True, False, 1, "o")))
    data[-4:-3] = b"\x02\x02x\x00"  # one command id, no outcomes, versions or times
    with pytest.raises(DecodeError) as err:
        codec.decode_state(bytes(data))
    assert err.value.reason is ReasonCode.MALFORMED
