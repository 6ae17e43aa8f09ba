"""``python -m bench.rescale_split``: time a rescale's split step (restore the old shards, route, write the seeds).

No Kafka, no Spark. Builds ``--objects`` object states (a real state: created and updated by ``commands.decide``,
so it carries a dedup window, encoded by the codec behind its write time) spread over ``--from`` shards by
murmur2, each shard uploaded as a real snapshot to a local checkpoint directory; then runs the split step as
``arbiter rescale`` does (``app.rescale.seed.split_into_seeds``) to ``--to`` shards, and prints its wall and
process time and the process's peak RSS. The split step is the part of a rescale's write pause that grows with
the state (the drain grows with the lag, the other steps are a few Kafka round trips).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import struct
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import rocksdict

from app.rescale.seed import split_into_seeds
from app.settings import Settings
from app.validator.murmur2 import partition_for
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.memory import shard_options
from commands import CreateObject, UpdateObject, decide
from commands.state import Limits
from schemas import codec


def _state_bytes() -> bytes:
    """Return one stored state value: write time + the codec bytes of an object updated 16 times."""
    t0, limits = datetime(2025, 6, 1, tzinfo=UTC), Limits()
    state = decide(None, CreateObject("c0", "o", "alice", t0, document='{"a": 1, "name": "some object"}'), limits).state
    for i in range(16):
        state = decide(state, UpdateObject(f"u{i}", "o", "alice", t0 + timedelta(seconds=i), patch=f'{{"b": {i}}}'),
                       limits).state
    assert state is not None
    return struct.pack(">q", int(time.time() * 1000)) + codec.encode_state(state)


def build(settings: Settings, checkpoint: str, objects: int, partitions: int, scratch: Path) -> int:
    """Write ``objects`` states over ``partitions`` shards as snapshots at ``checkpoint``; return the state bytes."""
    value = _state_bytes()
    shards: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(objects):
        oid = f"object-{i:09d}".encode()
        shards[partition_for(oid, partitions)].append(oid)
    opts = shard_options(settings.rocks_memory_mb, settings.rocks_write_buffer_mb)
    for p, ids in shards.items():
        db = rocksdict.Rdict(str(scratch / f"build-{p}"), opts)
        wb = rocksdict.WriteBatch(raw_mode=True)
        for oid in ids:
            wb.put(b"s:" + oid, value)
        db.write(wb)
        db.flush()
        rocksdict.Checkpoint(db).create_checkpoint(str(scratch / f"build-{p}.copy"))
        db.close()
        ShardStore(checkpoint, p, fsync=False).put_snapshot(0, scratch / f"build-{p}.copy", f"bench-{p}")
    return objects * len(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--from", dest="source", type=int, default=8)
    parser.add_argument("--to", dest="target", type=int, default=12)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arbiter-bench-rescale-"))
    try:
        settings = Settings(var_dir=root / "var", checkpoint_fsync=False)  # type: ignore[call-arg]
        scratch = root / "scratch"
        scratch.mkdir()
        size = build(settings, str(root / "old"), args.objects, args.source, scratch)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        wall, cpu = time.perf_counter(), time.process_time()
        routed, written = split_into_seeds(settings, str(root / "old"), args.source, str(root / "new"), args.target,
                                           scratch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert (routed, written) == (args.objects, args.target), (routed, written)
        print(f"{args.objects} objects ({size / 1e6:.0f} MB of state), {args.source} -> {args.target} shards: "
              f"split step {wall:.2f} s wall, {cpu:.2f} s process ({args.objects / wall:,.0f} objects/s); "
              f"peak RSS {rss / 1024:.0f} MB (before the step: {rss0 / 1024:.0f} MB)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
