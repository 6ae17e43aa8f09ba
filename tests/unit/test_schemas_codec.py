"""Avro + Confluent wire format: round trips, determinism, decode errors, schema evolution, stable ids."""

from __future__ import annotations

import copy
import json
import struct
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commands import (
    DeleteObject,
    Event,
    ObjectState,
    ReasonCode,
    RecentCommand,
    Rejection,
)
from schemas import codec
from schemas.catalog import IDS_FILE, STATE, SchemaCatalog, SchemaVersion
from schemas.codec import Codec, DecodeError
from tests.unit.record_strategies import record_strategies

pytestmark = pytest.mark.unit

texts = st.text(max_size=20)
# Hypothesis takes naive bounds and attaches the zone itself.
times = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),  # noqa: DTZ001
                     timezones=st.just(UTC))
longs = st.integers(0, 2**62)
RECORDS = record_strategies(texts, times, longs, max_editors=4, max_recent=4)
commands_st, events_st, rejections_st, states_st = RECORDS.commands, RECORDS.events, RECORDS.rejections, RECORDS.states

PAIRS = [
    (commands_st, codec.encode_command, codec.decode_command),
    (events_st, codec.encode_event, codec.decode_event),
    (rejections_st, codec.encode_rejection, codec.decode_rejection),
    (states_st, codec.encode_state, codec.decode_state),
]


@pytest.mark.parametrize(("strategy", "encode", "decode"), PAIRS, ids=["command", "event", "rejection", "state"])
def test_round_trip_and_deterministic(strategy, encode, decode) -> None:  # type: ignore[no-untyped-def]
    @settings(max_examples=60, deadline=None)
    @given(strategy)
    def check(value: object) -> None:
        data = encode(value)
        assert data[0] == 0 and data == encode(copy.deepcopy(value))
        assert decode(data) == value

    check()


@given(st.one_of(events_st, rejections_st))
@settings(max_examples=40, deadline=None)
def test_decode_outcome_tells_events_from_rejections_by_schema_id(outcome: Event | Rejection) -> None:
    assert codec.decode_outcome(codec.encode_outcome(outcome)) == outcome


def test_schema_ids_are_the_committed_ones() -> None:
    ids = json.loads(IDS_FILE.read_text())
    state = ObjectState(True, False, 1, "a")
    assert codec.schema_id_of(codec.encode_state(state)) == ids["arbiter.ObjectState"]["3"]["id"] == 1303
    assert codec.encode_state(state)[:5] == b"\x00" + struct.pack(">I", 1303)
    assert ids["arbiter.ObjectState"]["2"]["id"] == 1302
    assert ids["arbiter.ObjectState"]["1"]["id"] == 1301  # never renumbered


@pytest.mark.parametrize(("data", "reason"), [
    (b"", ReasonCode.MALFORMED),
    (b"\x00\x00\x00", ReasonCode.MALFORMED),
    (b"\x01\x00\x00\x03\xe9", ReasonCode.MALFORMED),
    (b"\x00\x00\x00\x00\x07rest", ReasonCode.UNSUPPORTED_SCHEMA),
    (b"\x00\x00\x00\x04\x4d", ReasonCode.UNSUPPORTED_SCHEMA),  # a state id where a command is expected
    (b"\x00\x00\x00\x03\xe9", ReasonCode.MALFORMED),  # command header, no body
    (b"\x00\x00\x00\x03\xe9\x0a", ReasonCode.MALFORMED),  # enum index out of range
])
def test_decode_errors_carry_a_reason(data: bytes, reason: ReasonCode) -> None:
    with pytest.raises(DecodeError) as err:
        codec.decode_command(data)
    assert err.value.reason is reason and err.value.code == reason.value


def test_trailing_and_truncated_bytes_are_malformed() -> None:
    data = codec.encode_command(DeleteObject("c", "o", "p", datetime(2025, 1, 1, tzinfo=UTC)))
    for bad in (data + b"\x00", data[:-1]):
        with pytest.raises(DecodeError) as err:
            codec.decode_command(bad)
        assert err.value.reason is ReasonCode.MALFORMED


@given(st.binary(max_size=64))
@settings(max_examples=200, deadline=None)
def test_garbage_after_a_valid_header_only_ever_raises_decode_error(body: bytes) -> None:
    for schema_id, decode in ((1001, codec.decode_command), (1301, codec.decode_state), (1201, codec.decode_outcome)):
        try:
            decode(b"\x00" + struct.pack(">I", schema_id) + body)
        except DecodeError as e:
            assert e.reason is ReasonCode.MALFORMED


def evolved_catalog() -> SchemaCatalog:
    """The repository's schemas plus a state version n+1 (id 1399) that adds a field with a default."""
    repo = SchemaCatalog.repository()
    newest = repo.latest(STATE)
    next_schema = copy.deepcopy(newest.schema)
    next_schema["fields"].append({"name": "labels", "type": {"type": "map", "values": "string"}, "default": {}})
    return SchemaCatalog([*repo.versions(), SchemaVersion(STATE, newest.version + 1, 1399, next_schema)])


def test_reader_at_version_n_plus_1_reads_data_written_at_n() -> None:
    state = ObjectState(True, False, 3, "alice", ("bob",), datetime(2025, 1, 1, tzinfo=UTC),
                        recent=(RecentCommand("c", "ACCEPTED", 3, datetime(2025, 1, 2, tzinfo=UTC)),))
    old = codec.encode_state(state)
    new = Codec(evolved_catalog())
    assert codec.schema_id_of(old) == 1303
    assert new.decode_state(old) == state
    written_v2 = new.encode_state(state)
    assert codec.schema_id_of(written_v2) == 1399 and new.decode_state(written_v2) == state
    with pytest.raises(DecodeError) as err:
        codec.decode_state(written_v2)  # an old reader does not know the new id
    assert err.value.reason is ReasonCode.UNSUPPORTED_SCHEMA
