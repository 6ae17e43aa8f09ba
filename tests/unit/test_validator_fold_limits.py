"""The shared fold never emits a record that cannot fit: an oversized outcome becomes a TOO_LARGE rejection.

Both state backends run this fold (``spark/processor.py`` and ``rocks/shard.py``); the rocksdb shard is run here too.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.limits import FALLBACK_KEEP_BYTES, size_limits
from app.settings import Settings
from app.validator.fold import InputRecord, fold, limits_for
from app.validator.murmur2 import partition_for
from app.validator.outputs import OutputRecord, outcome_record, record_size
from app.validator.rocks.shard import STATE, ShardStore, open_shard, run_task, shard_dir
from commands import (
    CreateObject,
    DeleteObject,
    Event,
    ObjectState,
    ReasonCode,
    Rejection,
    UpdateObject,
    decide,
)
from schemas import codec
from tests.unit.record_strategies import signature

pytestmark = pytest.mark.unit

AT = datetime(2025, 1, 1, tzinfo=UTC)
SMALL = 64 * 1024  # max_message_bytes: small topics keep these records small
S = Settings(partitions=1, topic_events="ev", topic_rejections="rj", topic_commands="cmd", max_message_bytes=SMALL)
BOUND = size_limits(SMALL).max_record_bytes

# State written before ids were bounded: an owner far over max_id_bytes, so the owner field of every event of the
# object is large; with a patch at the document limit, an accepted update's event cannot fit. (Larger than the room
# every event keeps for the most warnings at their bounds, ~21 KB, which this event does not use.)
LEGACY = ObjectState(exists=True, deleted=False, version=3, owner="o" * 24_000, editors=("bob",))


def rec(cmd: object, offset: int, key: bytes | None = None) -> InputRecord:
    k = key if key is not None else cmd.object_id.encode()  # type: ignore[attr-defined]
    v = codec.encode_command(cmd)  # type: ignore[arg-type]
    return InputRecord(k, v, "cmd", 0, offset, signature(k, v))


def big_patch() -> str:
    d = limits_for(S).max_document_bytes
    return '{"a":"' + "é" * ((d - 8) // 2) + "x" * ((d - 8) % 2) + '"}'


def _decoded(out: list[OutputRecord]) -> list[Event | Rejection]:
    for r in out:
        assert record_size(r) <= BOUND
    return [codec.decode_outcome(v) for _, _, v, _, _ in out]


def test_an_accepted_command_whose_event_does_not_fit_is_rejected_and_changes_nothing() -> None:
    update = UpdateObject("u1", "obj", "bob", AT, patch=big_patch())
    direct = decide(LEGACY, update, limits_for(S))
    assert isinstance(direct.outcome, Event)  # the domain accepts it ...
    assert record_size(outcome_record(direct.outcome, S, 0)) > BOUND  # ... but its event does not fit a record

    small = UpdateObject("u2", "obj", "bob", AT, patch='{"b": 1}')
    out, state, changed = fold(lambda: LEGACY, [rec(update, 7), rec(small, 8)], S)
    first, second = _decoded(out)
    assert isinstance(first, Rejection) and first.reason is ReasonCode.TOO_LARGE
    assert first.command_id == "u1" and first.object_id == "obj" and first.principal == "bob"
    assert first.occurred_at == AT and first.current_version == 3  # the attempt's answer, for the API's waiter
    assert first.original is not None
    assert (first.original.topic, first.original.partition, first.original.offset) == ("cmd", 0, 7)
    assert first.original.value is not None and len(first.original.value) == FALLBACK_KEEP_BYTES
    assert first.original.value_length == len(codec.encode_command(update))
    assert first.original.value_sha256 == hashlib.sha256(codec.encode_command(update)).hexdigest()
    assert "cmd[0]@7" in first.message and "changes nothing" in first.message
    # The next command sees the state as if the oversized one never happened: version 3 + 1.
    assert isinstance(second, Event) and second.version == 4
    assert changed and state is not None and state.version == 4

    out, state, changed = fold(lambda: LEGACY, [rec(update, 7)], S)
    assert not changed and state is LEGACY


def test_a_rejection_that_does_not_fit_keeps_clipped_ids() -> None:
    huge = "\U0001f600" * 5000  # 20,000 bytes each: over max_id_bytes, so decide says MALFORMED and repeats them
    cmd = DeleteObject(huge + "c", huge + "o", huge + "p", AT)
    direct = decide(None, cmd, limits_for(S)).outcome
    assert isinstance(direct, Rejection) and direct.reason is ReasonCode.MALFORMED
    assert record_size(outcome_record(direct, S, 0)) > BOUND

    loads: list[int] = []
    out, state, changed = fold(lambda: loads.append(1), [rec(cmd, 5)], S)
    (got,) = _decoded(out)
    assert isinstance(got, Rejection) and got.reason is ReasonCode.TOO_LARGE
    for name in ("command_id", "object_id", "principal"):
        value = getattr(got, name)
        assert len(value.encode()) <= 256 and value.endswith("…") and value.startswith("\U0001f600")
    assert out[0][1] == got.object_id.encode()  # the Kafka key is the clipped id too
    assert not changed and state is None


def test_the_fallback_is_deterministic() -> None:
    update = UpdateObject("u1", "obj", "bob", AT, patch=big_patch())
    runs = [fold(lambda: LEGACY, [rec(update, 7)], S)[0] for _ in range(2)]
    assert runs[0] == runs[1]


def test_undecodable_records_of_any_size_are_malformed_and_fit() -> None:
    garbage = b"\xff" + bytes(range(256)) * (SMALL // 256 - 1)  # a wrong magic byte, then ~the topic's maximum
    key = b"k" * 300
    out, state, changed = fold(lambda: None, [InputRecord(key, garbage, "cmd", 0, 1)], S)
    (got,) = _decoded(out)
    assert isinstance(got, Rejection) and got.reason is ReasonCode.MALFORMED  # not TOO_LARGE: kept within bounds
    assert got.original is not None and got.original.value_length == len(garbage)
    assert got.original.value == garbage[:size_limits(SMALL).keep_bytes]
    assert got.original.key == key and got.original.key_length == 300


def test_the_rocksdb_shard_rejects_and_does_not_store_an_event_that_does_not_fit(tmp_path: Path) -> None:
    s = S.model_copy(update={"var_dir": tmp_path / "var", "snapshot_every": 1000, "rocks_memory_mb": 16,
                             "rocks_write_buffer_mb": 4})
    ckpt = str(tmp_path / "ckpt")
    assert partition_for(b"obj", 1) == 0
    shard = open_shard(shard_dir(s, ckpt, 0), ShardStore(ckpt, 0), 0, s)
    stored = (1).to_bytes(8, "big") + codec.encode_state(LEGACY)
    shard.db[STATE + b"obj"] = stored
    shard.close()

    update = UpdateObject("u1", "obj", "bob", AT, patch=big_patch())
    create = CreateObject("c1", "new", "alice", AT, document="{}")
    result = run_task(s, ckpt, 0, [rec(update, 0), rec(create, 1)],
                      now_ms=2)
    first, second = _decoded(result.outputs)
    assert isinstance(first, Rejection) and first.reason is ReasonCode.TOO_LARGE
    assert isinstance(second, Event)
    shard = open_shard(shard_dir(s, ckpt, 0), ShardStore(ckpt, 0), 0, s)
    try:
        assert shard.db[STATE + b"obj"] == stored  # untouched
        assert STATE + b"new" in shard.db
    finally:
        shard.close()


def test_the_too_large_rejection_of_a_command_decided_under_rules_names_their_version() -> None:
    from app.validator.rules import ShardRules
    from commands.rules import canonical_rules

    doc = canonical_rules('{"rules": 1, "types": {}}')
    update = rec(UpdateObject("u1", "obj", "bob", AT, patch=big_patch()), 7)._replace(rules=2)
    out, _, changed = fold(lambda: LEGACY, [update], S, rules=ShardRules({2: doc}, 2))
    (refused,) = _decoded(out)
    assert isinstance(refused, Rejection) and refused.reason is ReasonCode.TOO_LARGE and not changed
    assert refused.rules_version == 2 and dict(out[0][4])["ce_rulesversion"] == b"2"
    plain, _, _ = fold(lambda: LEGACY, [rec(UpdateObject("u1", "obj", "bob", AT, patch=big_patch()), 7)], S)
    assert codec.decode_rejection(plain[0][2]).rules_version is None  # no rules: as before
