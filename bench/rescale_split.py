"""``python -m bench.rescale_split``: time a rescale's split step (restore the old shards, route, write the seeds).

No Kafka, no Spark. Builds ``--objects`` object states (a real state: created and updated by ``commands.decide``,
so it carries a dedup window of its own command ids and fingerprints, encoded by the codec behind its write time) spread over
``--from`` shards by murmur2, each shard uploaded as a real snapshot to a local checkpoint directory (``build``,
also what ``bench.rescale`` seeds the whole rescale with); then runs the split step as
``arbiter rescale`` does (``app.rescale.seed.split_into_seeds``) to ``--to`` shards, and prints its wall and
process time and the process's peak RSS. The split step is the part of a rescale's write pause that grows with
the state (the drain grows with the lag, the other steps are a few Kafka round trips).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import rocksdict

from app.rescale.seed import split_into_seeds
from app.settings import Settings
from app.validator.murmur2 import partition_for
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.memory import shard_options
from commands import CreateObject, UpdateObject, decide
from commands.state import Limits, ObjectState
from schemas import codec
from schemas.records import pack_fingerprints

#: Every bench object id has this length: a state made for this id is every object's, its id replaced byte for byte.
TEMPLATE_ID = "object-000000000"


def object_id(i: int) -> bytes:
    return f"object-{i:09d}".encode()


def _state(oid: str) -> ObjectState:
    """Return object ``oid`` created then updated 16 times by ``decide`` (a full dedup window of its own ids)."""
    t0, limits = datetime(2025, 6, 1, tzinfo=UTC), Limits()
    state = decide(None, CreateObject(f"c-{oid}", oid, "alice", t0, document='{"a": 1, "name": "some object"}'),
                   limits).state
    for i in range(16):
        state = decide(state, UpdateObject(f"u{i:02d}-{oid}", oid, "alice", t0 + timedelta(seconds=i),
                                           patch=f'{{"b": {i}}}'), limits).state
    assert state is not None
    return state


def state_values() -> Callable[[bytes], bytes]:
    """Return ``value(object id)``: a stored value (write time now + codec bytes) of its own for each object.

    Every object gets its own command ids and random bytes for their fingerprints (the hashes of its commands):
    as in a real shard, the compression of the shards is not flattered by millions of identical values. decide
    runs once, for a template whose id is then replaced byte for byte; the split moves the bytes unchanged, and a
    sample is checked to decode to that object's state.
    """
    written = struct.pack(">q", int(time.time() * 1000))
    state = _state(TEMPLATE_ID)
    template, prints = codec.encode_state(state), pack_fingerprints(state.recent)
    assert template.count(prints) == 1 and TEMPLATE_ID.encode() in template, "the state's layout is not as expected"
    head, tail = template.split(prints)
    ident = TEMPLATE_ID.encode()

    def value(oid: bytes) -> bytes:
        return b"".join((written, head.replace(ident, oid), os.urandom(len(prints)), tail.replace(ident, oid)))

    sample, real = object_id(7), _state(object_id(7).decode())
    decoded = codec.decode_state(value(sample)[8:])
    assert [r.command_id for r in decoded.recent] == [r.command_id for r in real.recent]
    assert replace(decoded, recent=()) == replace(real, recent=())
    return value


def build(settings: Settings, checkpoint: str, objects: int, partitions: int, scratch: Path) -> int:
    """Write ``objects`` states over ``partitions`` shards as snapshots at ``checkpoint``; return the state bytes.

    Streams: every shard's database is open at once and gets bounded write batches, so memory does not grow
    with ``objects``. Each shard is the key layout the validator writes (``s:<id>`` -> write time + state) and
    is uploaded by the validator's own ``ShardStore.put_snapshot``, so the split restores it as a validator would.
    """
    value = state_values()
    opts = shard_options(settings.rocks_memory_mb, settings.rocks_write_buffer_mb)
    dbs = {p: rocksdict.Rdict(str(scratch / f"build-{p}"), opts) for p in range(partitions)}
    batches = {p: rocksdict.WriteBatch(raw_mode=True) for p in range(partitions)}
    size = 0
    for i in range(objects):
        oid = object_id(i)
        p, v = partition_for(oid, partitions), value(oid)
        batches[p].put(b"s:" + oid, v)
        size += len(v)
        if (i + 1) % 50_000 == 0:
            for q, wb in batches.items():
                dbs[q].write(wb)
                batches[q] = rocksdict.WriteBatch(raw_mode=True)
    for p, db in dbs.items():
        db.write(batches[p])
        db.flush()
        rocksdict.Checkpoint(db).create_checkpoint(str(scratch / f"build-{p}.copy"))
        db.close()
        ShardStore(checkpoint, p, fsync=False).put_snapshot(0, scratch / f"build-{p}.copy", f"bench-{p}")
        shutil.rmtree(scratch / f"build-{p}", ignore_errors=True)
        shutil.rmtree(scratch / f"build-{p}.copy", ignore_errors=True)
    return size


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
