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
from app.rescale.split import M_HOLDS, M_RULES, merged_rules, refuse_holds, route, seed_meta
from app.settings import Settings
from app.validator.rocks.checkpoint import ShardStore, filesystem_of
from app.validator.rocks.memory import shard_options
from app.validator.rocks.shard import Shard, open_shard


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


def restore_shards(settings: Settings, checkpoint: str, partitions: int, scratch: Path) -> dict[int, Shard]:
    """Restore every shard of ``checkpoint`` into ``scratch`` and return them open (shards never written: absent)."""
    out: dict[int, Shard] = {}
    try:
        for p in range(partitions):
            store = ShardStore(checkpoint, p, fsync=False)
            if store.changelogs() or store.snapshots() or store.has_seed():
                out[p] = open_shard(scratch / f"old-{p:04d}", store, -1, settings)
    except BaseException:
        for shard in out.values():
            shard.close()
        raise
    return out


def read_shards(settings: Settings, checkpoint: str, partitions: int, scratch: Path) -> dict[int, dict[bytes, bytes]]:
    """Return every entry of every shard of ``checkpoint``, in memory (for tests and small states)."""
    shards = restore_shards(settings, checkpoint, partitions, scratch)
    try:
        return {p: {bytes(k): bytes(v) for k, v in s.db.items()} for p, s in shards.items()}  # type: ignore[arg-type]
    finally:
        for shard in shards.values():
            shard.close()


def split_into_seeds(settings: Settings, source: str, shards: int, target: str, partitions: int, scratch: Path,
                     after_each: Callable[[int], None] = lambda _: None) -> tuple[int, int]:
    """Split the shards of checkpoint ``source`` into ``partitions`` seeds of ``target``, streaming; skip done seeds.

    Memory stays bounded whatever the state: each old shard is read in key order and its entries go to the new
    shards' databases in write batches of ``BATCH`` entries. Returns (objects routed, seeds written now).
    """
    old = restore_shards(settings, source, shards, scratch)
    opts = shard_options(settings.rocks_memory_mb, settings.rocks_write_buffer_mb)
    new: dict[int, rocksdict.Rdict] = {}
    try:
        refuse_holds((p, s.db.get(M_HOLDS)) for p, s in old.items())
        rules = [s.db.get(M_RULES) for s in old.values()]
        meta = seed_meta(merged_rules({} if r is None else {M_RULES: bytes(r)} for r in rules))
        todo = [p for p in range(partitions) if not ShardStore(target, p).has_seed()]  # done before a kill: kept
        new = {p: rocksdict.Rdict(str(scratch / f"new-{p:04d}"), opts) for p in todo}
        batches = {p: rocksdict.WriteBatch(raw_mode=True) for p in todo}
        pending, routed = 0, 0
        for number, source_shard in old.items():
            entries = source_shard.db.items(from_key=b"s:")  # states and tombstones; the m: bookkeeping sorts first
            for p, key, value in route(entries, number, shards, partitions):  # type: ignore[arg-type]
                routed += key.startswith(b"s:")
                if p not in batches:
                    continue
                batches[p].put(key, value)
                pending += 1
                if pending >= BATCH:
                    _write(new, batches)
                    pending = 0
        _write(new, batches)
        written = 0
        for p in todo:
            seed = new.pop(p)
            for key, value in meta.items():
                seed.put(key, value)
            seed.flush()
            copy = scratch / f"new-{p:04d}.copy"
            rocksdict.Checkpoint(seed).create_checkpoint(str(copy))
            seed.close()
            ShardStore(target, p, fsync=settings.checkpoint_fsync).put_seed(copy)
            shutil.rmtree(copy, ignore_errors=True)
            written += 1
            after_each(p)
        return routed, written
    finally:
        for left in new.values():
            left.close()
        for opened in old.values():
            opened.close()


#: Entries routed between writes to the new shards' databases: bounds the memory of a split.
BATCH = 50_000


def _write(dbs: dict[int, rocksdict.Rdict], batches: dict[int, rocksdict.WriteBatch]) -> None:
    """Write the non-empty batches and replace them with new ones (a written batch is consumed)."""
    for p, wb in batches.items():
        if len(wb):
            dbs[p].write(wb)
            batches[p] = rocksdict.WriteBatch(raw_mode=True)


def scratch_dir(settings: Settings) -> Path:
    """Return a new scratch directory under ``var_dir`` (removed by the caller)."""
    base = settings.path(settings.var_dir) / "rescale"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="split-", dir=base))


def remove_scratch(settings: Settings) -> None:
    """Remove the scratch directories a killed split left (restored old shards: as large as the state)."""
    base = settings.path(settings.var_dir) / "rescale"
    for left in base.glob("split-*") if base.is_dir() else ():
        shutil.rmtree(left, ignore_errors=True)
