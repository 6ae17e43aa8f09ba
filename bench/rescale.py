"""``python -m bench.rescale``: time a whole ``arbiter rescale`` and the write pause the API's writers see.

A real broker (``--bootstrap``, else a throwaway one) and ``--objects`` object states over ``--from`` shards,
seeded at the checkpoint location by ``bench.rescale_split.build`` (each shard written in the validator's key
layout and uploaded by its ``ShardStore``: 10M decisions through Spark would take hours to set up the same
state). Then ``app.rescale.steps.rescale`` runs as ``arbiter rescale --partitions`` does, every step, while a
``GenerationWatch`` (what each API process runs) is sampled: the API answers writes ``503 WRITES_PAUSED`` exactly
while the generation it sees is paused. Prints the time of each step, the whole rescale, the pause as the
generations topic records it (the switch's record time minus the pause's) and as the watch saw it, peak RSS, and
the time the new generation's validator takes to restore its seeds before its first batch (writes are accepted
then; their decisions wait for it).

What is not in it: the drain waits for the validator's lag at the pause; here the validator is caught up (no
command is on the old topic), so the drain is one end-offset check. With a running validator, add about one
micro-batch (its trigger interval plus a batch) to the pause.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from app.api.writes.producer import CommandProducer
from app.rescale.generation import GenerationWatch, history
from app.rescale.seed import restore_shards, scratch_dir
from app.rescale.steps import rescale
from app.settings import Settings, checkpoint_uri
from app.topics import ensure_topics
from bench.harness import bootstrap_for
from bench.rescale_split import build
from commands import CreateObject
from schemas import codec


class PauseSampler:
    """Sample what a running API sees (its ``GenerationWatch``) every ``every_s``: when writes pause and resume."""

    def __init__(self, watch: GenerationWatch, every_s: float = 0.005) -> None:
        self.watch, self.every_s = watch, every_s
        self.paused_at: float | None = None
        self.resumed_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = self.watch.generation.number
        while not self._stop.wait(self.every_s):
            g = self.watch.generation
            if g.paused and self.paused_at is None:
                self.paused_at = time.monotonic()
            if g.number > start and not g.paused and self.resumed_at is None:
                self.resumed_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench_settings(bootstrap: str, root: Path, partitions: int) -> Settings:
    """Return the settings of a rescale bench under ``root``: topics of their own (created), rocksdb shards."""
    tag = uuid.uuid4().hex[:8]
    settings = Settings(  # type: ignore[call-arg]
        kafka_bootstrap=bootstrap, var_dir=root / "var", partitions=partitions, state_backend="rocksdb",
        checkpoint_location=str(root / "checkpoint"), topic_commands=f"bench-commands-{tag}",
        topic_events=f"bench-events-{tag}", topic_rejections=f"bench-rejections-{tag}")
    ensure_topics(settings)
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--from", dest="source", type=int, default=8)
    parser.add_argument("--to", dest="target", type=int, default=12)
    parser.add_argument("--bootstrap", help="an existing broker (default: start a throwaway one)")
    parser.add_argument("--work", type=Path, help="work directory (default: a new temporary one, removed after)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arbiter-bench-rescale-", dir=args.work))
    load0 = os.getloadavg()
    try:
        with bootstrap_for(args.bootstrap, root) as bootstrap:
            settings = bench_settings(bootstrap, root, args.source)
            scratch = root / "build"
            scratch.mkdir()
            t = time.perf_counter()
            size = build(settings, checkpoint_uri(settings), args.objects, args.source, scratch)
            print(f"seeded {args.objects:,} objects ({size / 1e6:,.0f} MB of state values) over {args.source} shards "
                  f"in {time.perf_counter() - t:.1f} s; checkpoint {_du(root / 'checkpoint') / 1e6:,.0f} MB on disk",
                  flush=True)

            watch = GenerationWatch(settings).start()
            sampler = PauseSampler(watch)
            steps: list[str] = []
            rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0, cpu = time.monotonic(), time.process_time()
            target = rescale(settings, args.target, by="bench.rescale", report=lambda line: (
                steps.append(line), print(line, flush=True)))
            total, cpu = time.monotonic() - t0, time.process_time() - cpu
            deadline = time.monotonic() + 10
            while sampler.resumed_at is None and time.monotonic() < deadline:
                time.sleep(0.01)
            sampler.stop()
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

            # A write after the switch goes through the API's producer to the new topic.
            producer = CommandProducer(settings, generation=watch)
            cmd = CreateObject("after-rescale", "object-after", "alice", datetime.now(UTC), document="{}")
            asyncio.run(producer.send(cmd.object_id, codec.encode_command(cmd)))
            producer.close()
            watch.stop()
            assert producer.topic == target.topic, (producer.topic, target)

            paused, switched = history(settings)[-2:]
            recorded = (datetime.fromisoformat(switched.at) - datetime.fromisoformat(paused.at)).total_seconds()
            seen = (None if sampler.paused_at is None or sampler.resumed_at is None
                    else sampler.resumed_at - sampler.paused_at)

            # What the new generation's validator does before its first batch: restore every seed.
            restore_at = scratch_dir(settings)
            t = time.perf_counter()
            shards = restore_shards(settings, target.checkpoint, target.partitions, restore_at)
            restore = time.perf_counter() - t
            for shard in shards.values():
                shard.close()
            shutil.rmtree(restore_at, ignore_errors=True)

            print(f"\n{args.objects:,} objects, {args.source} -> {args.target} partitions: whole rescale {total:.1f} s "
                  f"({cpu:.1f} s of this process's CPU); "
                  f"write pause {recorded:.1f} s recorded (pause record -> switch record), "
                  f"{'n/a' if seen is None else f'{seen:.1f} s'} seen by a GenerationWatch as the API runs it; "
                  f"peak RSS {rss / 1024:,.0f} MB (before the rescale: {rss0 / 1024:,.0f} MB); the new generation's "
                  f"{target.partitions} seeds restore in {restore:.1f} s; load average {load0[0]:.1f} before, "
                  f"{os.getloadavg()[0]:.1f} after")
            print("steps: " + "; ".join(line.split(": ", 1)[-1] for line in steps))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
