"""Rules control records in the validator: signed switches, refusals that change nothing, both backends' bookkeeping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from app.rules.control import CONTROL_KEY, RULES_CONTROL, ControlInvalid, Deploy, decode_control, encode_control
from app.settings import Settings
from app.signing import RecordSigner
from app.validator.fold import InputRecord, fold
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import open_shard, run_task, shard_dir
from app.validator.rules import NO_RULES, ShardRules, control_step, decode_shard_rules, encode_shard_rules, rules_checker
from app.validator.spark.rules_stage import RulesTagger, Timelines
from commands import CreateObject, ReasonCode, Rejection, UpdateObject
from commands.rules import canonical_rules, rules_digest
from schemas import codec
from tests.unit.record_strategies import control_signature, signature

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
NOW = 1_800_000_000_000
TOPIC = "commands"
DOC_A = canonical_rules('{"rules": 1, "types": {}}')
DOC_B = canonical_rules('{"rules": 1, "types": {}, "description": "b"}')


def deploy(version: int, document: str = DOC_A) -> Deploy:
    return Deploy(version, rules_digest(document), document, "ops", T0)


def control(d: Deploy, offset: int, *, signed: bool = True, partition: int = 0) -> InputRecord:
    value = encode_control(d)
    return InputRecord(CONTROL_KEY, value, TOPIC, partition, offset, control_signature(CONTROL_KEY, value) if signed else None,
                       None, None, RULES_CONTROL)


def command(cmd: CreateObject | UpdateObject, offset: int) -> InputRecord:
    k, v = cmd.object_id.encode(), codec.encode_command(cmd)
    return InputRecord(k, v, TOPIC, 0, offset, signature(k, v))


def step(rules: ShardRules, r: InputRecord):  # noqa: ANN201
    return control_step(rules, r.key, r.value, r.signature, r.topic, r.partition, r.offset, rules_checker(Settings()),
                        1024)


def test_control_value_round_trips_and_malformed_values_are_named() -> None:
    d = deploy(3)
    assert decode_control(encode_control(d)) == d
    assert encode_control(d) == encode_control(decode_control(encode_control(d)))  # canonical: same bytes
    for bad, match in [(b"{", "not JSON"), (b"[]", "exactly"), (encode_control(d).replace(b'"version":3', b'"version":0'),
                                                                 "positive")]:
        with pytest.raises(ControlInvalid, match=match):
            decode_control(bad)


def test_a_genuine_control_record_switches_and_a_repeat_changes_nothing() -> None:
    first = step(NO_RULES, control(deploy(1), 5))
    assert first.deploy == deploy(1) and first.rules == ShardRules({1: DOC_A}, 1)
    again = step(first.rules, control(deploy(1), 9))
    assert again.outcome is None and again.rules is first.rules and again.deploy is None
    second = step(first.rules, control(deploy(2, DOC_B), 12))
    assert second.rules == ShardRules({1: DOC_A, 2: DOC_B}, 2)


@pytest.mark.parametrize("how", ["unsigned", "forged", "other key"])
def test_an_unsigned_or_forged_control_record_is_unauthenticated_and_changes_nothing(how: str) -> None:
    r = control(deploy(1), 5, signed=how != "unsigned")
    if how == "forged":
        r = r._replace(value=encode_control(deploy(1, DOC_B)))  # the signature is of another value
    if how == "other key":
        other = RecordSigner({"evil": b"not-the-key"}, "evil")
        r = r._replace(signature=other.sign(r.key, r.value))
    got = step(NO_RULES, r)
    assert isinstance(got.outcome, Rejection) and got.outcome.reason == ReasonCode.UNAUTHENTICATED
    assert got.rules is NO_RULES and got.deploy is None


def test_a_stale_version_or_a_wrong_digest_is_refused_and_changes_nothing() -> None:
    rules = ShardRules({1: DOC_A, 2: DOC_B}, 2)
    stale = step(rules, control(deploy(1, DOC_B), 7))  # version 1 again, another document
    assert isinstance(stale.outcome, Rejection) and stale.outcome.reason == ReasonCode.VERSION_CONFLICT
    assert stale.rules is rules
    lying = Deploy(3, rules_digest(DOC_A), DOC_B, "ops", T0)
    bad = step(rules, control(lying, 8))
    assert isinstance(bad.outcome, Rejection) and bad.outcome.reason == ReasonCode.MALFORMED
    assert "digest" in bad.outcome.message and bad.rules is rules


def test_shard_rules_round_trip_canonically() -> None:
    rules = ShardRules({2: DOC_B, 1: DOC_A}, 2)
    assert decode_shard_rules(encode_shard_rules(rules)) == rules
    assert decode_shard_rules(None) is NO_RULES


def test_fold_refuses_a_version_the_shard_lacks_by_name_and_changes_nothing() -> None:
    create = command(CreateObject("c1", "o1", "alice", T0, document="{}"), 1)._replace(rules=7)
    out, state, changed = fold(lambda: None, [create], Settings(partitions=1), rules=ShardRules({1: DOC_A}, 1))
    rejection = codec.decode_rejection(out[0][2])
    assert rejection.reason == ReasonCode.RULES_VERSION_UNKNOWN and "version 7" in rejection.message
    assert not changed and state is None


def _decided_versions(outputs: list) -> list[int | None]:  # noqa: ANN001
    return [codec.decode_outcome(o[2]).rules_version for o in outputs if o[0] != TOPIC]


def test_rocks_shard_switches_at_the_control_offset_and_keeps_its_versions_across_reopen_and_restore(
        tmp_path: Path) -> None:
    s = Settings(partitions=1, var_dir=tmp_path / "var", snapshot_every=2, rocks_memory_mb=16,
                 rocks_write_buffer_mb=4)
    ckpt = str(tmp_path / "ckpt")
    batch0 = [command(CreateObject("c1", "o1", "alice", T0, document="{}"), 0), control(deploy(1), 1),
              command(UpdateObject("u1", "o1", "alice", T0 + timedelta(seconds=1), patch="{}"), 2)]
    got = run_task(s, ckpt, 0, batch0, NOW).outputs
    assert _decided_versions(got) == [None, 1]  # the create before the switch, the update after it
    forged = control(deploy(2, DOC_B), 3, signed=False)
    batch1 = [forged, command(UpdateObject("u2", "o1", "alice", T0 + timedelta(seconds=2), patch="{}"), 4)]
    got = run_task(s, ckpt, 1, batch1, NOW)  # snapshot_every=2: a snapshot after this batch
    assert codec.decode_rejection(got.outputs[0][2]).reason == ReasonCode.UNAUTHENTICATED
    assert _decided_versions(got.outputs[1:]) == [1]  # the forged record changed nothing
    shard_path = shard_dir(s, ckpt, 0)
    import shutil

    shutil.rmtree(shard_path)  # lost local state: restored from the snapshot
    batch2 = [command(UpdateObject("u3", "o1", "alice", T0 + timedelta(seconds=3), patch="{}"), 5)]
    got = run_task(s, ckpt, 2, batch2, NOW)
    assert got.restored_from == "snapshot" and _decided_versions(got.outputs) == [1]
    shard = open_shard(shard_path, ShardStore(ckpt, 0), 3, s)
    try:
        assert shard.rules() == ShardRules({1: DOC_A}, 1)
    finally:
        shard.close()


def _arrow(records: list[InputRecord]) -> pa.RecordBatch:
    cols = {"gkey": [r.key for r in records], "key": [r.key for r in records], "value": [r.value for r in records],
            "topic": [r.topic for r in records], "partition": [r.partition for r in records],
            "offset": [r.offset for r in records], "signature": [r.signature for r in records],
            "traceparent": [None] * len(records), "tracestate": [None] * len(records),
            "control": [r.control for r in records]}
    types = {"partition": pa.int32(), "offset": pa.int64(), "topic": pa.string()}
    return pa.RecordBatch.from_pydict({k: pa.array(v, types.get(k, pa.binary())) for k, v in cols.items()})


def test_spark_tagger_tags_each_row_with_the_version_at_its_offset_and_a_replay_tags_alike(tmp_path: Path) -> None:
    s, ckpt = Settings(partitions=1), str(tmp_path / "ckpt")
    c = CreateObject("c1", "o1", "alice", T0, document="{}")
    batch = _arrow([command(c, 0), control(deploy(1), 1), command(c, 2), control(deploy(1), 3),
                    control(deploy(2, DOC_B), 4, signed=False), command(c, 5), control(deploy(2, DOC_B), 6),
                    command(c, 7)])
    tagger = RulesTagger(s, ckpt)
    first = [b.column("rules").to_pylist() for b in tagger([batch])]
    assert first == [[None, None, 1, 1, 1, 1, 1, 2]]  # a control row carries the version before it
    assert [(o, v) for o, v, _ in Timelines(ckpt).read(0)] == [(1, 1), (6, 2)]
    assert [b.column("rules").to_pylist() for b in RulesTagger(s, ckpt)([batch])] == first  # replayed batch
    later = _arrow([command(c, 8)])
    assert [b.column("rules").to_pylist() for b in RulesTagger(s, ckpt)([later])] == [[2]]
