"""The rocksdb backend's query: Kafka source → shard step (``mapInArrow``) → the shared Kafka sink, one streaming plan.

No shuffle: Spark's Kafka source reads each topic partition as one task in offset order; ``coalesce`` puts
whole partitions together into as many tasks as there are cores (each partition still one contiguous run in
offset order), and the shard step sends each partition's run to the shard server that holds that partition's
shard open between batches (``server``, ``client``) and yields the sink rows it returns. No foreachBatch:
the batch id and time reach the tasks from Spark itself (see ``ShardTasks``), which saves a Python round trip
and a second query plan per micro-batch (``python -m bench.validator.query_shape``; docs/benchmarks.md).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from app.errors import ArbiterError
from app.settings import Settings, checkpoint_uri
from app.validator.backend import query_name
from app.validator.pyworker import freeze_imports_once
from app.validator.rocks.checkpoint import filesystem_of
from app.validator.rocks.client import ShardClient
from app.validator.rocks.shard import ShardOrderError, host_settings, rocks_root
from app.validator.rocks.wire import column_values, int_values, read_ipc, settings_bytes, table_ipc
from app.validator.sink import SINK_DDL, sink_options
from app.validator.source import INPUT_COLUMNS, kafka_source

log = logging.getLogger("arbiter.validator.rocks")

def shard_step(settings: Settings, checkpoint: str, batch_id: int, now_ms: int,
               batches: Iterator[pa.RecordBatch], settings_wire: bytes | None = None) -> Iterator[pa.RecordBatch]:
    """Send one Spark task's rows, one run per partition, to their shard servers; yield the sink rows they return.

    A task holds one or more whole topic partitions (``coalesce`` concatenates them, each in offset order):
    each contiguous run of one partition is that shard's share of the batch. A partition split across two
    runs means something reordered the rows: ``ShardOrderError``, nothing decided.
    """
    rows = pa.Table.from_batches(list(batches)).combine_chunks()
    if not rows.num_rows:
        return
    runs = _shard_runs(rows)
    t0 = time.monotonic()
    replies = ShardClient(settings, checkpoint, settings_wire).run_all(
        batch_id, now_ms, [(partition, table_ipc(rows.slice(start, length))) for partition, start, length in runs])
    for (partition, _, length), reply in zip(runs, replies, strict=True):
        log.debug("shard %d batch %d: %d records%s, %s", partition, batch_id, length,
                  " (re-emitted)" if reply.replayed else "", reply.text)
        if reply.rows:
            yield from read_ipc(reply.rows).to_batches()
    log.debug("task of batch %d: %d shards in %.0f ms", batch_id, len(runs), (time.monotonic() - t0) * 1000)


def _shard_runs(rows: pa.Table) -> list[tuple[int, int, int]]:
    """Return ``(partition, start, length)`` per contiguous run of one topic partition; raise if one appears twice."""
    partitions = int_values(rows.column("partition").chunk(0)) if rows.num_rows else []
    topics = column_values(rows.column("topic").chunk(0)) if rows.num_rows else []
    runs: list[tuple[int, int, int]] = []
    seen: set[tuple[str, int]] = set()
    start = 0
    n = len(partitions)
    for i in range(1, n + 1):
        if i == n or partitions[i] != partitions[start] or topics[i] != topics[start]:
            head = (topics[start], partitions[start])
            if head in seen:
                raise ShardOrderError(f"{head[0]}[{head[1]}] appears twice in one task: the rows were "
                                      "reordered before the shard step (repartition, shuffle or sort)")
            seen.add(head)
            runs.append((partitions[start], start, i - start))
            start = i
    return runs


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
        self.settings = settings.for_tasks()  # pickled into every task: no secret travels to the executors
        self.checkpoint = checkpoint
        self.settings_wire = settings_bytes(self.settings)  # once, on the driver: not re-serialised in every task

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
        settings, wire = _on_this_host(self.settings, self.settings_wire)
        yield from shard_step(settings, self.checkpoint, int(raw), now_ms, itertools.chain([first], batches), wire)
        freeze_imports_once()


_host_settings: dict[bytes, tuple[Settings, bytes]] = {}


def _on_this_host(settings: Settings, wire: bytes) -> tuple[Settings, bytes]:
    """Return the settings (and their wire form) a task uses on this host: ``host_settings``, once per process."""
    cached = _host_settings.get(wire)
    if cached is None:
        local = host_settings(settings)
        cached = _host_settings[wire] = (local, wire if local is settings else settings_bytes(local))
    return cached


def shard_tasks(settings: Settings, master: str, parallelism: int) -> int:
    """Return how many tasks a micro-batch's shards are spread over: ``shard_tasks``, else by where Spark runs.

    Local mode: one per core (``coalesce``: fewer tasks, less per-task overhead; every task on this host
    reaches the same shard servers, so where a task runs does not matter). On a cluster: one task per
    partition, no coalesce, because then each task keeps the preferred location Spark's Kafka source gives
    its partition: one executor, chosen from the sorted list of live executors by the partition's hash, the
    same every batch while the executors stay the same. A coalesced task carries only a host preference
    (Spark's ``DefaultPartitionCoalescer`` groups by host), and its grouping changes from batch to batch:
    the shards moved between executors every few batches, each move a restore from the checkpoint location
    (``python -m bench.validator.rocks_cluster_placement``; docs/benchmarks.md).
    """
    if settings.shard_tasks:
        return settings.shard_tasks
    return parallelism if master.startswith("local") else settings.partitions


def build_query(spark: Any, settings: Settings, *, available_now: bool = False) -> Any:  # noqa: ANN401
    """Start the rocksdb-backed validator query (the caller holds the checkpoint and checked its layout)."""
    uri = checkpoint_uri(settings)
    name = query_name(settings)
    source = kafka_source(spark, settings, available_now=available_now).select(*INPUT_COLUMNS)
    tasks = shard_tasks(settings, str(spark.sparkContext.master), spark.sparkContext.defaultParallelism)
    if tasks < settings.partitions:
        source = source.coalesce(tasks)  # whole partitions per task, each in offset order: no shuffle
    writer = source.mapInArrow(ShardTasks(settings, uri), SINK_DDL).writeStream.format("kafka") \
        .options(**sink_options(settings)).queryName(name).option("checkpointLocation", uri)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(
        processingTime=settings.trigger_interval)
    query = writer.start()
    log.info("validator started: backend=rocksdb query=%s checkpoint=%s shards=%s", name, uri,
             rocks_root(settings, uri))
    return query
