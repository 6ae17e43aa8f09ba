"""``python -m bench.rescale_handover``: the stall a writer sees at a rescale, from its first 503 to its first decision.

A real broker (``--bootstrap``, else a throwaway one), ``--objects`` object states over ``--from`` shards seeded at
the checkpoint location (``bench.rescale_split.build``), and a real validator (``python -m app.validator`` from
``--tree``, default this checkout: run an older commit's tree to compare) running on generation 0. A writer does
what an API process does for its clients: every ``--every`` seconds it sends one new object's create through the
API's producer (``CommandProducer``, following the generations topic), which answers ``503 WRITES_PAUSED`` while a
cut-over runs. Once the validator decided its first write on generation 0 (it runs warm, as under load), ``arbiter
rescale --partitions`` runs in this process, every step (the drain waits for the validator). Measured: the first
503, the first write accepted after the switch, and the first decision on the new generation (its event read from
the events topic). A validator that exits at the switch (exit code 130, as before issue 51) is started again at
once, as ``arbiter run``'s supervisor does (at once: no check interval, no backoff, which favours it).

The seeded shards are a snapshot "after batch 0" (``build``): the writes generation 0's validator decides in its
batch 0 are in its changelog 0, which a restore from that snapshot skips, so those few objects are missing from
the split (the bench's own artefact; no effect on what it times).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from app.api.problems import ApiError
from app.api.writes.producer import CommandProducer
from app.rescale.generation import GenerationWatch
from app.rescale.steps import rescale
from app.settings import Settings, checkpoint_uri
from bench.harness import bootstrap_for
from bench.rescale import bench_settings
from bench.rescale_split import build
from commands import CreateObject
from schemas import codec

ROOT = Path(__file__).resolve().parents[1]


def _env(settings: Settings, tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env.update({
        "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "ARBITER_PARTITIONS": str(settings.partitions),
        "ARBITER_TOPIC_COMMANDS": settings.topic_commands, "ARBITER_TOPIC_EVENTS": settings.topic_events,
        "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections, "ARBITER_VAR_DIR": str(settings.var_dir),
        "ARBITER_CHECKPOINT_LOCATION": settings.checkpoint_location, "ARBITER_STATE_BACKEND": "rocksdb",
        "ARBITER_SPARK_MASTER": "local[2]", "ARBITER_VALIDATOR_METRICS_PORT": "0",
        "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(tree),
    })
    return env


class Validator:
    """``python -m app.validator`` from ``tree``, started again at once whenever it exits 130 (a planned stop)."""

    def __init__(self, settings: Settings, tree: Path, log: Path) -> None:
        self.env, self.tree, self.log = _env(settings, tree), tree, log
        self.starts: list[float] = []
        self.proc = self._start()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.starts.append(time.monotonic())
        with self.log.open("ab") as out:
            return subprocess.Popen([sys.executable, "-m", "app.validator"], env=self.env, cwd=self.tree,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            code = self.proc.poll()
            if code == 130:
                self.proc = self._start()
            elif code is not None:
                raise SystemExit(f"the validator exited with {code}; see {self.log}")

    def wait_started(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while b"validator started" not in self.log.read_bytes():
            assert self.proc.poll() in (None, 130), self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the validator did not start"
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)
        try:
            os.killpg(self.proc.pid, 9)  # its Spark JVM and Python workers, in its own session
        except ProcessLookupError:
            pass


class Writer:
    """One create every ``every_s`` through the API's producer; notes the first 503 and the first send after it."""

    def __init__(self, settings: Settings, watch: GenerationWatch, every_s: float) -> None:
        self.producer = CommandProducer(settings, generation=watch)
        self.every_s = every_s
        self.first_503: float | None = None
        self.refused = 0
        self.accepted_after: tuple[float, str] | None = None  # time, object id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(self.every_s):
            i += 1
            oid = f"handover-{i}"
            cmd = CreateObject(f"c-{oid}", oid, "alice", datetime.now(UTC), document="{}")
            try:
                asyncio.run(self.producer.send(oid, codec.encode_command(cmd)))
            except ApiError as e:
                assert e.code == "WRITES_PAUSED", e
                self.refused += 1
                self.first_503 = self.first_503 or time.monotonic()
                continue
            if self.first_503 is not None and self.accepted_after is None:
                self.accepted_after = (time.monotonic(), oid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.close()


def _wait_decided(settings: Settings, key: bytes, timeout: float) -> float:
    """Return when an event keyed ``key`` is read from the events topic (read from its start)."""
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "log_level": 0})
    n = settings.output_partitions or settings.partitions
    consumer.assign([TopicPartition(settings.topic_events, p, 0) for p in range(n)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.02)
            if msg is not None and msg.error() is None and msg.key() == key:
                return time.monotonic()
        raise AssertionError(f"no event for {key!r} within {timeout:.0f} s")
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--from", dest="source", type=int, default=8)
    parser.add_argument("--to", dest="target", type=int, default=12)
    parser.add_argument("--every", type=float, default=0.05, help="seconds between the writer's sends")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose validator runs")
    parser.add_argument("--bootstrap", help="an existing broker (default: start a throwaway one)")
    parser.add_argument("--log", type=Path, help="where to keep the validator's log (default: removed with the work)")
    parser.add_argument("--work", type=Path, help="work directory (default: a new temporary one, removed after)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="arbiter-bench-handover-", dir=args.work))
    load0 = os.getloadavg()
    validator = None
    try:
        with bootstrap_for(args.bootstrap, root) as bootstrap:
            settings = bench_settings(bootstrap, root, args.source)
            scratch = root / "build"
            scratch.mkdir()
            if args.objects:
                build(settings, checkpoint_uri(settings), args.objects, args.source, scratch)
            log = args.log or root / "validator.log"
            validator = Validator(settings, args.tree.resolve(), log)
            validator.wait_started()
            watch = GenerationWatch(settings).start()
            writer = Writer(settings, watch, args.every)
            _wait_decided(settings, b"handover-1", 600)  # generation 0's validator is warm
            t0 = time.monotonic()
            steps: list[str] = []
            rescale(settings, args.target, by="bench.rescale_handover", wait_s=300, report=steps.append)
            switched = time.monotonic()
            while writer.accepted_after is None:
                assert time.monotonic() - switched < 30, "no write accepted after the switch"
                time.sleep(0.01)
            accepted, oid = writer.accepted_after
            decided = _wait_decided(settings, oid.encode(), 120)
            writer.stop()
            watch.stop()
            first = writer.first_503
            assert first is not None
            restarts = len(validator.starts) - 1
            print(f"{args.objects:,} objects, {args.source} -> {args.target}, validator from {args.tree}: "
                  f"first 503 -> first decision on the new generation {decided - first:.1f} s "
                  f"(503s for {accepted - first:.1f} s, {writer.refused} refused; then {decided - accepted:.1f} s to "
                  f"the decision); the rescale {switched - t0:.1f} s; validator processes started at the switch: "
                  f"{restarts}; load average {load0[0]:.1f} before, {os.getloadavg()[0]:.1f} after", flush=True)
            print("steps: " + "; ".join(line.split(": ", 1)[-1] for line in steps))
            validator.stop()
            validator = None
    finally:
        if validator is not None:
            validator.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
