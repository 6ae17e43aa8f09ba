"""The rocksdb backend's query: Kafka source → per-partition shard step in foreachBatch → the shared Kafka sink.

No shuffle: Spark's Kafka source reads each topic partition as one task in offset order, and the shard
step runs in that task (``mapInArrow`` keeps the partitioning), so task = command-topic partition = shard.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.streaming import StreamingQueryListener

from app.settings import Settings, checkpoint_uri
from app.validator.fold import InputRecord
from app.validator.rocks.lock import FileLock, acquire_job_lock, job_lock_path
from app.validator.rocks.shard import rocks_root, run_task
from app.validator.sink import SINK_DDL, sink_options
from app.validator.source import kafka_source

log = logging.getLogger("arbiter.validator.rocks")

OUT_SCHEMA = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32())])


def shard_step(settings: Settings, checkpoint: str, batch_id: int, now_ms: int,
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Run one Spark task's rows (one topic partition, offset order) through its shard; yield the sink rows."""
    records: list[InputRecord] = []
    for b in batches:
        records += map(InputRecord, b.column("key").to_pylist(), b.column("value").to_pylist(),
                       _values(b.column("topic")), _ints(b.column("partition")), _ints(b.column("offset")))
    if not records:
        return
    t0 = time.monotonic()
    result = run_task(settings, checkpoint, batch_id, records, now_ms)
    out = result.outputs
    log.debug("shard %d batch %d: %d records in %.0f ms%s", records[0].partition, batch_id, len(records),
             (time.monotonic() - t0) * 1000, " (re-emitted)" if result.replayed else "")
    topics, keys, values, partitions = zip(*out, strict=True) if out else ((), (), (), ())
    yield pa.RecordBatch.from_arrays(
        [pa.array(topics, pa.string()), pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
         pa.array(partitions, pa.int32())], schema=OUT_SCHEMA)


def _values(col: pa.Array) -> list[Any]:
    """Return ``col`` as Python values; a column of one repeated value (a task's topic) without a per-row copy."""
    if col.null_count == 0 and len(col) > 0:
        distinct = col.unique()
        if len(distinct) == 1:
            return [distinct[0].as_py()] * len(col)
    return col.to_pylist()


def _ints(col: pa.Array) -> list[Any]:
    """Return an integer column as Python ints, through numpy when it has no nulls (several times faster)."""
    return col.to_numpy().tolist() if col.null_count == 0 else col.to_pylist()


class _ForEachBatch:
    """The foreachBatch function: fix the batch's processing time, run the shard step, write to Kafka."""

    def __init__(self, settings: Settings, checkpoint: str) -> None:
        self.settings = settings
        self.checkpoint = checkpoint

    def __call__(self, df: Any, batch_id: int) -> None:  # noqa: ANN401
        settings, checkpoint, now_ms = self.settings, self.checkpoint, int(time.time() * 1000)

        def step(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return shard_step(settings, checkpoint, batch_id, now_ms, batches)

        started = time.monotonic()
        out = df.select("key", "value", "topic", "partition", "offset").mapInArrow(step, SINK_DDL)
        out.write.format("kafka").options(**sink_options(settings)).save()
        log.info("rocksdb batch=%d shard_step_and_sink_ms=%.0f", batch_id, (time.monotonic() - started) * 1000)


class _LockRelease(StreamingQueryListener):
    """Release each query's job lock when the query terminates (stopped or failed)."""

    def __init__(self) -> None:
        self.locks: dict[str, FileLock] = {}
        self.guard = threading.Lock()

    def reclaim(self, spark: Any, path: Path) -> None:  # noqa: ANN401
        """Release this process's lock on ``path`` if its query has ended but the listener has not run yet."""
        with self.guard:
            for qid, lock in list(self.locks.items()):
                if lock.path == path and spark.streams.get(qid) is None:
                    self.locks.pop(qid).release()

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802, ANN401
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802, ANN401
        pass

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802, ANN401
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802, ANN401
        with self.guard:
            lock = self.locks.pop(str(event.id), None)
        if lock is not None:
            lock.release()


_releasers: dict[int, _LockRelease] = {}


def _releaser(spark: Any) -> _LockRelease:  # noqa: ANN401
    key = id(spark._jsparkSession)
    if key not in _releasers:
        _releasers[key] = _LockRelease()
        spark.streams.addListener(_releasers[key])
    return _releasers[key]


def build_query(spark: Any, settings: Settings, *, available_now: bool = False) -> Any:  # noqa: ANN401
    """Start the rocksdb-backed validator query; raise ``CheckpointInUse`` if another job owns the checkpoint."""
    from app.validator.job import query_name
    from app.validator.progress import listener_for, progress_path

    uri = checkpoint_uri(settings)
    releaser = _releaser(spark)
    releaser.reclaim(spark, job_lock_path(uri, rocks_root(settings, uri)))
    lock = acquire_job_lock(uri, rocks_root(settings, uri))
    try:
        name = query_name(settings)
        listener_for(spark).watch(name, progress_path(settings))
        writer = kafka_source(spark, settings).writeStream.queryName(name).option("checkpointLocation", uri) \
            .foreachBatch(_ForEachBatch(settings, uri))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
            processingTime=settings.trigger_interval)
        query = writer.start()
        with releaser.guard:
            releaser.locks[str(query.id)] = lock
        if not query.isActive:  # terminated before the listener knew its lock
            lock.release()
    except BaseException:
        lock.release()
        raise
    log.info("validator started: backend=rocksdb query=%s checkpoint=%s shards=%s", name, uri,
             rocks_root(settings, uri))
    return query
