"""``python -m bench.validator.core_step``: the shard's decision step alone, Python fold vs compiled core, same batches.

Runs one partition's batches (``bench.validator.shard_task``'s workload, or the peers' stream with ``--peer``) through
a shard held open (``Shard.run``: sweep, state lookup, decide, WriteBatch, changelog upload to a local checkpoint), once
with ``ARBITER_CORE=off`` and once through the core, in fresh directories, alternating; prints process seconds per
command of the batches after the first (state already there) and checks that both wrote the same outputs and states.
No Arrow, no socket: what the core replaces plus the shard's own I/O around it. ``--rules FILE``: the same workload
with its creates typed (``--rules-type``, ``bench.validator.workload.TYPED_MEMBERS``) and the document deployed by a
control record in front of the first (untimed) batch, so every timed command is decided under it.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

from app.native import core as core_loader
from app.settings import Settings
from app.signing import signer_for
from app.validator.fold import InputRecord
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import open_shard, shard_dir
from bench.validator.shard_task import NOW_MS, partition_records, peer_records


def signed(records: list[InputRecord]) -> list[InputRecord]:
    signer = signer_for(Settings())
    return [r._replace(signature=signer.sign(r.key, r.value)) if r.value is not None else r for r in records]


def run(records: list[InputRecord], batch: int, partitions: int, mode: str) -> tuple[list[float], str, dict[str, int]]:
    """Return each batch's process seconds, a digest of the outputs and database, and the shard's counters."""
    with tempfile.TemporaryDirectory(prefix="arbiter-core-bench-") as tmp:
        settings = Settings(partitions=partitions, var_dir=Path(tmp) / "var", snapshot_every=10_000,
                            core=mode)  # type: ignore[arg-type]
        ckpt = str(Path(tmp) / "ckpt")
        shard = open_shard(shard_dir(settings, ckpt, 0), ShardStore(ckpt, 0), 0, settings)
        digest = hashlib.sha256()
        times = []
        try:
            for b, i in enumerate(range(0, len(records), batch)):
                start = time.process_time()
                out = shard.run(b, records[i:i + batch], settings, NOW_MS + b * 1000).outputs
                times.append(time.process_time() - start)
                for o in out:
                    digest.update(repr(o).encode())
            for k, v in shard.db.items():
                if not bytes(k).startswith((b"m:lineage", b"m:seed")):
                    digest.update(bytes(k) + b"=" + bytes(v))
            counters = dict(shard.counters)
        finally:
            shard.close()
    return times, digest.hexdigest(), counters


def deployed(document: str, records: list[InputRecord]) -> list[InputRecord]:
    """Return ``records`` behind the control record deploying ``document`` as version 1 (offsets shifted by one)."""
    from app.rules.control import CONTROL_KEY, RULES_CONTROL, Deploy, encode_control
    from app.signing import CONTROL_DOMAIN
    from bench.validator.workload import T0
    from commands.rules import canonical_rules, rules_digest

    canonical = canonical_rules(document)
    control = encode_control(Deploy(1, rules_digest(canonical), canonical, "ops", T0))
    sig = signer_for(Settings(), CONTROL_DOMAIN).sign(CONTROL_KEY, control)
    first = records[0]
    return [InputRecord(CONTROL_KEY, control, first.topic, first.partition, first.offset, sig, None, None, RULES_CONTROL),
            *(r._replace(offset=r.offset + 1) for r in records)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=12_500, help="objects per partition")
    p.add_argument("--batch", type=int, default=12_500)
    p.add_argument("--batches", type=int, default=4, help="the first (empty state) is not timed")
    p.add_argument("--repeat", type=int, default=3, help="runs of each path, alternating; per batch the best counts")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--peer", type=Path, metavar="JSONL", help="the peers' commands.jsonl instead of the synthetic one")
    p.add_argument("--rules", type=Path, metavar="FILE", help="a rules document in force for every timed command")
    p.add_argument("--rules-type", default="order", help="the type the workload's creates name with --rules")
    a = p.parse_args()
    if core_loader.load("auto") is None:
        raise SystemExit(f"no core: {core_loader.status()}")
    records = signed(peer_records(a.peer, a.batch * a.batches, a.partitions) if a.peer is not None
                     else partition_records(a.objects, a.batch * a.batches, a.partitions, 0, a.seed,
                                            a.rules_type if a.rules is not None else None))
    if a.rules is not None:
        records = deployed(a.rules.read_text("utf-8"), records)[:-1]  # as many records, so as many batches
    runs: dict[str, list[Any]] = {"off": [], "auto": []}
    for r in range(a.repeat):
        for mode in ("off", "auto") if r % 2 == 0 else ("auto", "off"):
            runs[mode].append(run(records, a.batch, a.partitions, mode))
    digests = {d for figs in runs.values() for _, d, _ in figs}
    timed = len(records) - a.batch
    per = {}
    for mode, figs in runs.items():
        best = [min(t) for t in zip(*[f[0] for f in figs], strict=True)]
        per[mode] = sum(best[1:]) / timed
        counters = figs[0][2]
        extra = "" if mode == "off" else (f"; core decided {counters.get('core_records', 0):,} of "
                                          f"{counters.get('records', 0):,} records, fallback "
                                          f"{ {k[14:]: v for k, v in counters.items() if k.startswith('core_fallback_')} }")
        print(f"ARBITER_CORE={mode}: {per[mode] * 1e6:.1f} µs/command (process time of Shard.run, {timed:,} commands in "
              f"{a.batches - 1} batches of {a.batch:,}, per batch the best of {a.repeat}){extra}")
    print(f"core / Python fold: {per['auto'] / per['off']:.2f}x the CPU per command")
    if len(digests) > 1:
        raise SystemExit(f"outputs or states differ between the paths: {sorted(digests)}")
    print(f"outputs and states sha256: {digests.pop()} (identical on both paths)")


if __name__ == "__main__":
    main()
