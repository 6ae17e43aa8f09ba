"""The rocksdb query's task function: several whole partitions per task, each against its own shard, in order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from app.settings import Settings
from app.validator.fold import InputRecord
from app.validator.murmur2 import partition_for
from app.validator.rocks.query import NotInStreamingQuery, ShardTasks, shard_step
from app.validator.rocks.shard import ShardOrderError, run_task
from app.validator.rocks.wire import int_values as _ints
from commands import CreateObject
from schemas import codec

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
NOW = 1_800_000_000_000
PARTS = 3


def records_of(partition: int, n: int) -> list[InputRecord]:
    """Return ``n`` creates whose keys route to ``partition`` (murmur2), at offsets 0..n-1."""
    out: list[InputRecord] = []
    i = 0
    while len(out) < n:
        oid = f"obj-{i}"
        i += 1
        if partition_for(oid.encode(), PARTS) != partition:
            continue
        cmd = CreateObject(f"c-{oid}", oid, "alice", T0 + timedelta(seconds=i), document="{}")
        out.append(InputRecord(oid.encode(), codec.encode_command(cmd), "commands", partition, len(out)))
    return out


def arrow(records: list[InputRecord]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([r.key for r in records], pa.binary()), pa.array([r.value for r in records], pa.binary()),
         pa.array([r.topic for r in records], pa.string()), pa.array([r.partition for r in records], pa.int32()),
         pa.array([r.offset for r in records], pa.int64()), pa.array([r.signature for r in records], pa.binary())],
        names=["key", "value", "topic", "partition", "offset", "signature"])


def settings_in(tmp_path: Path, name: str) -> Settings:
    return Settings(partitions=PARTS, var_dir=tmp_path / name, snapshot_every=1000, rocks_memory_mb=16,
                    rocks_write_buffer_mb=4)


def test_a_task_with_several_partitions_equals_one_task_per_partition(tmp_path: Path) -> None:
    per_part = {p: records_of(p, 5) for p in range(PARTS)}
    together = [r for p in (2, 0, 1) for r in per_part[p]]  # coalesce's order need not be the partitions' order
    s = settings_in(tmp_path, "one-task")
    got = [row for b in shard_step(s, str(tmp_path / "ck1"), 0, NOW, iter([arrow(together)]))
           for row in b.to_pylist()]
    s2 = settings_in(tmp_path, "per-partition")
    want = [{"topic": t, "key": k, "value": v, "partition": q, "headers": [{"key": n, "value": d} for n, d in h]}
            for p in (2, 0, 1) for t, k, v, q, h in run_task(s2, str(tmp_path / "ck2"), 0, per_part[p], NOW).outputs]
    assert got == want
    assert len(got) == 15 and {r["partition"] for r in got} == {0, 1, 2}


def test_a_partition_split_in_two_runs_is_refused_before_anything_is_decided(tmp_path: Path) -> None:
    a, b = records_of(0, 4), records_of(1, 2)
    s = settings_in(tmp_path, "split")
    with pytest.raises(ShardOrderError, match="appears twice"):
        list(shard_step(s, str(tmp_path / "ck"), 0, NOW, iter([arrow(a[:2] + b + a[2:])])))
    assert not (tmp_path / "split" / "rocks").exists() or not any((tmp_path / "split" / "rocks").rglob("CURRENT"))


def test_the_task_function_refuses_to_run_outside_a_streaming_query(tmp_path: Path) -> None:
    step = ShardTasks(settings_in(tmp_path, "nobatch"), str(tmp_path / "ck"))
    with pytest.raises(NotInStreamingQuery, match=r"streaming\.sql\.batchId") as raised:
        list(step(iter([arrow(records_of(0, 1))])))
    assert raised.value.code == "NOT_IN_STREAMING_QUERY"


@pytest.mark.parametrize("kind", [pa.int32(), pa.int64()])
def test_int_columns_read_from_the_arrow_buffer_equal_to_pylist(kind: pa.DataType) -> None:
    values = [0, 1, -5, 2**31 - 1, -(2**31), 7, 9]
    col = pa.array(values, kind)
    assert _ints(col) == values
    assert _ints(col.slice(2, 3)) == values[2:5]  # an offset into the buffer, as a sliced batch has
    assert _ints(pa.array([1, None, 3], kind)) == [1, None, 3]
    assert _ints(pa.array([], kind)) == []


def test_the_batch_time_is_read_from_sparks_offset_log(tmp_path: Path) -> None:
    from app.validator.rocks.query import BatchTimeUnknown, batch_time_ms

    offsets = tmp_path / "ckpt" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "5").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795433289524,"conf":{}}\n{"c":{"0":3}}')
    assert batch_time_ms(str(tmp_path / "ckpt"), 5) == 1795433289524
    with pytest.raises(BatchTimeUnknown, match="batch 6"):
        batch_time_ms(str(tmp_path / "ckpt"), 6)
