"""The rocksdb backend's query: Kafka source → shard step (``mapInArrow``) → the shared Kafka sink, one streaming plan.

No shuffle: Spark's Kafka source reads each topic partition as one task in offset order; ``coalesce`` puts
whole partitions together into as many tasks as there are cores (each partition still one contiguous run in
offset order), and the shard step runs each partition's run against that partition's shard. No foreachBatch:
the batch id and time reach the tasks from Spark itself (see ``ShardTasks``), which saves a Python round trip
and a second query plan per micro-batch (``python -m bench.validator.query_shape``; docs/benchmarks.md).
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from app.errors import ArbiterError
from app.settings import Settings, checkpoint_uri
from app.validator.fold import InputRecord
from app.validator.rocks.checkpoint import filesystem_of
from app.validator.rocks.lock import FileLock, acquire_job_lock, job_lock_path
from app.validator.rocks.shard import ShardOrderError, rocks_root, run_task
from app.validator.sink import SINK_DDL, sink_options
from app.validator.source import kafka_source

log = logging.getLogger("arbiter.validator.rocks")

OUT_SCHEMA = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32())])


def shard_step(settings: Settings, checkpoint: str, batch_id: int, now_ms: int,
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Run one Spark task's rows through their shards; yield the sink rows.

    A task holds one or more whole topic partitions (``coalesce`` concatenates them, each in offset order):
    each contiguous run of one partition is that shard's share of the batch. A partition split across two
    runs means something reordered the rows: ``ShardOrderError``, nothing decided.
    """
    records: list[InputRecord] = []
    for b in batches:
        records += map(InputRecord, b.column("key").to_pylist(), b.column("value").to_pylist(),
                       _values(b.column("topic")), _ints(b.column("partition")), _ints(b.column("offset")))
    if not records:
        return
    for part in _shard_runs(records):
        t0 = time.monotonic()
        result = run_task(settings, checkpoint, batch_id, part, now_ms)
        out = result.outputs
        log.debug("shard %d batch %d: %d records in %.0f ms%s", part[0].partition, batch_id, len(part),
                  (time.monotonic() - t0) * 1000, " (re-emitted)" if result.replayed else "")
        if not out:
            continue
        topics, keys, values, partitions = zip(*out, strict=True)
        yield pa.RecordBatch.from_arrays(
            [pa.array(topics, pa.string()), pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
             pa.array(partitions, pa.int32())], schema=OUT_SCHEMA)


def _shard_runs(records: list[InputRecord]) -> list[list[InputRecord]]:
    """Split a task's records into one list per topic partition; raise if a partition's rows are not contiguous."""
    runs: list[list[InputRecord]] = []
    seen: set[tuple[str, int]] = set()
    start = 0
    for i in range(1, len(records) + 1):
        if i == len(records) or records[i].partition != records[start].partition \
                or records[i].topic != records[start].topic:
            head = records[start]
            if (head.topic, head.partition) in seen:
                raise ShardOrderError(f"{head.topic}[{head.partition}] appears twice in one task: the rows were "
                                      "reordered before the shard step (repartition, shuffle or sort)")
            seen.add((head.topic, head.partition))
            runs.append(records[start:i])
            start = i
    return runs


def _values(col: pa.Array) -> list[Any]:
    """Return ``col`` as Python values; a column of one repeated value (a task's topic) without a per-row copy."""
    if col.null_count == 0 and len(col) > 0:
        distinct = col.unique()
        if len(distinct) == 1:
            return [distinct[0].as_py()] * len(col)
    return col.to_pylist()


_INT_FORMATS = {pa.int32(): "i", pa.int64(): "q"}


def _ints(col: pa.Array) -> list[Any]:
    """Return an integer column as Python ints, read straight from its Arrow buffer when it has no nulls.

    Several times faster than ``to_pylist``, and not through numpy, whose Arrow conversion imports pandas:
    ~1 s of every new Python worker's first task (py-spy, docs/benchmarks.md).
    """
    fmt = _INT_FORMATS.get(col.type)
    if col.null_count or fmt is None or sys.byteorder != "little":
        return col.to_pylist()
    width = col.type.bit_width // 8
    return memoryview(col.buffers()[1])[col.offset * width:(col.offset + len(col)) * width].cast(fmt).tolist()


class NotInStreamingQuery(ArbiterError):
    """The shard step ran without Spark's micro-batch id (outside a streaming query): it cannot be idempotent."""

    code = "NOT_IN_STREAMING_QUERY"


BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's MicroBatchExecution on every job of a micro-batch
_batch_times: dict[tuple[str, int], int] = {}


class BatchTimeUnknown(ArbiterError):
    """Spark's offset log has no readable entry for the batch a task runs."""

    code = "BATCH_TIME_UNKNOWN"


def batch_time_ms(checkpoint: str, batch_id: int) -> int:
    """Return the processing time Spark fixed for ``batch_id``: ``batchTimestampMs`` of its offset log entry.

    It is the value ``current_timestamp()`` would give the batch, but read here instead of carried as a
    column: Spark turns ``current_timestamp()`` into a literal inlined in the generated code, so every batch
    missed the codegen cache and compiled new classes in its tasks (Janino, then the JIT; JFR,
    docs/benchmarks.md, fourth pass). The driver writes the entry before it runs the batch, and a re-run
    reads the same entry, so a replay sees the same time.
    """
    key = (checkpoint, batch_id)
    cached = _batch_times.get(key)
    if cached is not None:
        return cached
    fs, root = filesystem_of(checkpoint)
    path = f"{root.rstrip('/')}/offsets/{batch_id}"
    try:
        with fs.open_input_stream(path) as f:
            head = f.read(1 << 20).split(b"\n", 2)
        ms = int(json.loads(head[1])["batchTimestampMs"])
    except (OSError, IndexError, KeyError, ValueError) as e:
        raise BatchTimeUnknown(f"cannot read batchTimestampMs of batch {batch_id} from {path}: {e}") from e
    if len(_batch_times) > 64:
        _batch_times.clear()
    _batch_times[key] = ms
    return ms


class ShardTasks:
    """The ``mapInArrow`` function of the streaming query: find the micro-batch's id and time, run ``shard_step``.

    The batch id comes from the task's local property that Spark sets for each micro-batch, and the time
    from Spark's offset log (``batch_time_ms``), where the driver records it before the batch runs: a re-run
    of the batch (task retry, or restart after a crash) sees the same id and the same time.
    """

    def __init__(self, settings: Settings, checkpoint: str) -> None:
        self.settings = settings
        self.checkpoint = checkpoint

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        raw = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if raw is None:
            raise NotInStreamingQuery(f"no {BATCH_ID_PROPERTY} on this task: the shard step runs only in a streaming "
                                      "query, whose batch id keys the shards' idempotency")
        first = None
        for first in batches:
            if len(first):
                break
        if first is None or not len(first):
            return
        now_ms = batch_time_ms(self.checkpoint, int(raw))
        yield from shard_step(self.settings, self.checkpoint, int(raw), now_ms, itertools.chain([first], batches))


_locks: dict[str, FileLock] = {}  # job locks of the queries this process started, by query id
_locks_guard = threading.Lock()


def _reclaim(spark: Any, path: Path) -> None:  # noqa: ANN401
    """Release this process's lock on ``path`` if its query has ended but its watch has not noticed yet."""
    with _locks_guard:
        for qid, lock in list(_locks.items()):
            if lock.path == path and spark.streams.get(qid) is None:
                _locks.pop(qid).release()


def _release(qid: str) -> None:
    with _locks_guard:
        lock = _locks.pop(qid, None)
    if lock is not None:
        lock.release()


def build_query(spark: Any, settings: Settings, *, available_now: bool = False) -> Any:  # noqa: ANN401
    """Start the rocksdb-backed validator query; raise ``CheckpointInUse`` if another job owns the checkpoint."""
    from app.validator.job import query_name
    from app.validator.progress import QueryWatch, progress_path

    uri = checkpoint_uri(settings)
    _reclaim(spark, job_lock_path(uri, rocks_root(settings, uri)))
    lock = acquire_job_lock(uri, rocks_root(settings, uri))
    try:
        name = query_name(settings)
        source = kafka_source(spark, settings).select(
            "key", "value", "topic", "partition", "offset")
        tasks = settings.shard_tasks or spark.sparkContext.defaultParallelism
        if tasks < settings.partitions:
            source = source.coalesce(tasks)  # whole partitions per task, each in offset order: no shuffle
        writer = source.mapInArrow(ShardTasks(settings, uri), SINK_DDL).writeStream.format("kafka") \
            .options(**sink_options(settings)).queryName(name).option("checkpointLocation", uri)
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
            processingTime=settings.trigger_interval)
        query = writer.start()
        qid = str(query.id)
        with _locks_guard:
            _locks[qid] = lock
        # Releases the job lock when the query ends (stopped or failed); a new build_query reclaims it sooner.
        QueryWatch(query, progress_path(settings), on_end=lambda: _release(qid))
    except BaseException:
        lock.release()
        raise
    log.info("validator started: backend=rocksdb query=%s checkpoint=%s shards=%s", name, uri,
             rocks_root(settings, uri))
    return query
