"""The checkpoint side of a rescale: is the old generation drained, read its shards, write the new shards' seeds.

Everything here reads and writes the checkpoint location only (``app.validator.rocks.checkpoint``), never a
running validator's local copies: a shard is restored into a scratch directory from its snapshot and
changelogs, exactly as a validator on a new host would restore it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import rocksdict
from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyarrow import fs as pafs

from app.errors import BrokerUnavailable
from app.rescale.errors import NotDrained
from app.settings import Settings
from app.validator.rocks.checkpoint import ShardStore, filesystem_of
from app.validator.rocks.memory import shard_options
from app.validator.rocks.shard import open_shard


def committed_offsets(checkpoint: str, topic: str) -> dict[int, int]:
    """Return the next offset per partition of ``topic`` after the newest batch Spark committed in ``checkpoint``.

    Spark writes ``offsets/<n>`` before batch n runs and ``commits/<n>`` after its outputs are written: the
    offsets of the newest committed batch are what is decided *and* on the output topics. Empty before any.
    """
    fs, root = filesystem_of(checkpoint)

    def ids(sub: str) -> list[int]:
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/{sub}", allow_not_found=True))
        return sorted(int(i.base_name) for i in infos if i.base_name.isdigit())

    commits = ids("commits")
    if not commits:
        return {}
    with fs.open_input_stream(f"{root}/offsets/{commits[-1]}") as f:
        lines = f.read().decode().splitlines()
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        body = json.loads(line)
        if isinstance(body, dict) and topic in body:
            return {int(p): int(o) for p, o in body[topic].items()}
    return {}


def end_offsets(settings: Settings, topic: str, partitions: int) -> dict[int, int]:
    """Return the high watermark of every partition of ``topic``."""
    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "arbiter-rescale", "log_level": 0,
                  **settings.kafka_config})
    try:
        return {p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]) for p in range(partitions)}
    except KafkaException as e:
        raise BrokerUnavailable(f"cannot read the end offsets of {topic}: {e}") from e
    finally:
        c.close()


def lag(settings: Settings, checkpoint: str, topic: str, partitions: int) -> dict[int, int]:
    """Return the commands per partition not yet committed by the validator (only partitions with some)."""
    done = committed_offsets(checkpoint, topic)
    return {p: end - done.get(p, 0) for p, end in end_offsets(settings, topic, partitions).items()
            if end > done.get(p, 0)}


def check_drained(settings: Settings, checkpoint: str, topic: str, partitions: int) -> None:
    """Raise ``NotDrained`` naming the lag unless the validator committed every command of ``topic``."""
    behind = lag(settings, checkpoint, topic, partitions)
    if behind:
        raise NotDrained(f"the validator has not committed {sum(behind.values())} command(s) of {topic} "
                         f"(by partition: {dict(sorted(behind.items()))}); with writes paused, let it run "
                         "(or `arbiter validator --available-now`) and run the rescale again")


def read_shards(settings: Settings, checkpoint: str, partitions: int, scratch: Path) -> dict[int, dict[bytes, bytes]]:
    """Restore every shard of ``checkpoint`` into ``scratch`` and return its entries (shards never written: absent)."""
    out: dict[int, dict[bytes, bytes]] = {}
    for p in range(partitions):
        store = ShardStore(checkpoint, p, fsync=False)
        if not store.changelogs() and not store.snapshots() and not store.has_seed():
            continue
        shard = open_shard(scratch / f"old-{p:04d}", store, -1, settings)
        try:
            out[p] = {bytes(k): bytes(v) for k, v in shard.db.items()}  # type: ignore[arg-type]  # raw mode: bytes
        finally:
            shard.close()
    return out


def write_seeds(settings: Settings, checkpoint: str, shards: dict[int, dict[bytes, bytes]], scratch: Path,
                after_each: Callable[[int], None] = lambda _: None) -> int:
    """Write each new shard as the seed of ``checkpoint``; skip those already complete. Return the seeds written."""
    written = 0
    opts = shard_options(settings.rocks_memory_mb, settings.rocks_write_buffer_mb)
    for p, entries in sorted(shards.items()):
        store = ShardStore(checkpoint, p, fsync=settings.checkpoint_fsync)
        if store.has_seed():
            continue  # written before a kill: a seed is complete once its marker is there
        path, copy = scratch / f"new-{p:04d}", scratch / f"new-{p:04d}.copy"
        db = rocksdict.Rdict(str(path), opts)
        try:
            wb = rocksdict.WriteBatch(raw_mode=True)
            for key, value in entries.items():
                wb.put(key, value)
            db.write(wb)
            db.flush()
            rocksdict.Checkpoint(db).create_checkpoint(str(copy))
        finally:
            db.close()
        store.put_seed(copy)
        shutil.rmtree(copy, ignore_errors=True)
        written += 1
        after_each(p)
    return written


def scratch_dir(settings: Settings) -> Path:
    """Return a new scratch directory under ``var_dir`` (removed by the caller)."""
    base = settings.path(settings.var_dir) / "rescale"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="split-", dir=base))
