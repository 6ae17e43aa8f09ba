"""``python -m bench.validator.snapshot_cost --objects 1000000,10000000``: what one shard snapshot costs.

Fills one shard (a real RocksDB database, ``open_shard``) with N object states written straight into the database,
as the validator would have left them, then decides one real batch and takes a snapshot (the first: every SST
file is new), then decides a batch touching ``--changed`` objects and takes a second snapshot (incremental: only
the new SST files). The baseline, in the same run, is a full copy of the same RocksDB checkpoint to the
checkpoint location (what a snapshot cost before SST files were shared). Prints bytes and seconds of each, and
the local database's size. No Spark, no broker: the snapshot path alone.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import rocksdict
from pyarrow import fs as pafs

from app.settings import Settings
from app.validator.fold import InputRecord
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import STATE, Shard, open_shard, shard_dir
from commands import ObjectState, UpdateObject
from schemas import codec

NOW = 1_800_000_000_000
T0 = datetime(2027, 1, 15, 12, 0, tzinfo=UTC)


def fill(shard: Shard, n: int, chunk: int = 200_000) -> None:
    """Write ``n`` live objects' states (owner alice, version 1) in WriteBatches, as decided batches leave them."""
    stamp = struct.pack(">q", NOW)
    for start in range(0, n, chunk):
        wb = rocksdict.WriteBatch(raw_mode=True)
        for i in range(start, min(n, start + chunk)):
            state = ObjectState(exists=True, deleted=False, version=1, owner="alice", created_at=T0, updated_at=T0,
                                document_size=64)
            wb.put(STATE + f"obj-{i:09d}".encode(), stamp + codec.encode_state(state))
        shard.db.write(wb)


def updates(n: int, changed: int, offset: int, seed: int) -> list[InputRecord]:
    """``changed`` updates by alice spread over the ``n`` objects, at offsets from ``offset``."""
    step = max(1, n // changed)
    out = []
    for j in range(changed):
        oid = f"obj-{(j * step + seed) % n:09d}"
        cmd = UpdateObject(f"u{seed}-{j}", oid, "alice", T0 + timedelta(seconds=seed), patch='{"b": 2}')
        out.append(InputRecord(oid.encode(), codec.encode_command(cmd), "commands", 0, offset + j))
    return out


def snapshot(shard: Shard, batch: int) -> tuple[int, float]:
    """Take the snapshot after ``batch``; return (bytes uploaded, seconds)."""
    before = shard.counters["snapshot_bytes"]
    t0 = time.perf_counter()
    shard.snapshot(batch, keep=2)
    return shard.counters["snapshot_bytes"] - before, time.perf_counter() - t0


def full_copy(shard: Shard, dest: Path) -> tuple[int, float]:
    """The baseline: a RocksDB checkpoint copied whole to ``dest`` (the layout before shared SST files)."""
    tmp = Path(tempfile.mkdtemp(prefix="arbiter-full-"))
    try:
        t0 = time.perf_counter()
        rocksdict.Checkpoint(shard.db).create_checkpoint(str(tmp / "db"))
        dest.mkdir(parents=True, exist_ok=True)
        pafs.copy_files(str(tmp / "db"), str(dest), source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=pafs.LocalFileSystem())
        seconds = time.perf_counter() - t0
        return sum(f.stat().st_size for f in dest.iterdir() if f.is_file()), seconds
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(n: int, changed: int, work: Path) -> None:
    s = Settings(partitions=1, var_dir=work / "var", snapshot_every=1_000_000)
    ckpt = str(work / "ckpt")
    shard = open_shard(shard_dir(s, ckpt, 0), ShardStore(ckpt, 0), 0, s)
    try:
        t0 = time.perf_counter()
        fill(shard, n)
        filled = time.perf_counter() - t0
        shard.run(0, updates(n, changed, 0, 0), s, NOW)
        first = snapshot(shard, 0)
        shard.run(1, updates(n, changed, changed, 1), s, NOW)
        second = snapshot(shard, 1)
        base = full_copy(shard, work / "full-copy")
        local = sum(f.stat().st_size for f in shard_dir(s, ckpt, 0).iterdir() if f.is_file())
    finally:
        shard.close()
    mib = 1 << 20
    print(f"{n:>11,} objects (filled in {filled:.1f} s), local database {local / mib:,.1f} MiB; batches of {changed:,} "
          "updates:")
    print(f"  first snapshot (all files new)   {first[0] / mib:10,.1f} MiB  {first[1]:7.2f} s")
    print(f"  next snapshot (incremental)      {second[0] / mib:10,.1f} MiB  {second[1]:7.2f} s")
    print(f"  full copy (baseline, same state) {base[0] / mib:10,.1f} MiB  {base[1]:7.2f} s   "
          f"incremental / full: {second[0] / max(base[0], 1):.4f} of the bytes, "
          f"{second[1] / max(base[1], 1e-9):.3f} of the time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objects", default="1000000,10000000", help="comma-separated object counts, one shard each")
    ap.add_argument("--changed", type=int, default=1000, help="objects updated between the two snapshots")
    args = ap.parse_args()
    for n in (int(x) for x in args.objects.split(",")):
        work = Path(tempfile.mkdtemp(prefix="arbiter-bench-snap-"))
        try:
            run(n, args.changed, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
