"""``python -m bench.api``: the API under uvicorn in a second process, loaded over loopback; see docs/benchmarks.md.

Uses ``ARBITER_KAFKA_BOOTSTRAP`` if set, else starts a throwaway broker on free ports (stopped by its PID).
Phases, all in one run: raw producer (encode + produce + acks, no HTTP), single-command requests, single
requests with ``Prefer: wait`` (outcomes written by a small in-bench decider that folds ``commands.decide``
in a Python consumer — it isolates the API's wait path from Spark's micro-batch latency), and the batch route.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

from app.api.callers.identity import dev_token
from app.api.writes.producer import producer_config
from app.local.kafka_broker import LocalBroker, free_port
from app.settings import Settings
from app.topics import ensure_topics
from bench.api.load import LoadResult, request_bytes, run_load
from commands import CreateObject, Event, ObjectState, decide
from schemas import codec

SECRET = "bench-secret"  # noqa: S105


def raw_producer_rate(settings: Settings, n: int) -> float:
    """Commands/s for encode + produce + all acks with the API's own producer configuration, no HTTP."""
    p = Producer(producer_config(settings))
    now = datetime.now(UTC)
    cmds = [CreateObject(str(uuid.uuid4()), f"raw-{i}", "bench", now, document='{"n": 1}') for i in range(n)]
    errors = []

    def cb(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    for c in cmds:
        while True:
            try:
                p.produce(settings.topic_commands, codec.encode_command(c), c.object_id.encode(), on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(60)
    elapsed = time.perf_counter() - start
    assert not errors, errors[:3]
    return n / elapsed


class Decider(threading.Thread):
    """A stand-in validator for the wait phase: commands -> decide (per-object state in a dict) -> outcomes."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.s = settings
        self.running = True
        self.decided = 0

    def run(self) -> None:
        s = self.s
        c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 5})
        md = c.list_topics(s.topic_commands, timeout=10)
        c.assign([TopicPartition(s.topic_commands, p, c.get_watermark_offsets(TopicPartition(s.topic_commands, p))[1])
                  for p in md.topics[s.topic_commands].partitions])
        p = Producer({"bootstrap.servers": s.kafka_bootstrap, "linger.ms": 1, "partitioner": "murmur2_random"})
        states: dict[str, ObjectState | None] = {}
        while self.running:
            for m in c.consume(500, 0.05):
                if m.error():
                    continue
                cmd = codec.decode_command(m.value())
                d = decide(states.get(cmd.object_id), cmd)
                states[cmd.object_id] = d.state
                topic = s.topic_events if isinstance(d.outcome, Event) else s.topic_rejections
                p.produce(topic, codec.encode_outcome(d.outcome), m.key())
                self.decided += 1
            p.poll(0)
        p.flush(10)
        c.close()


def tree_cpu_s(pid: int) -> float:
    """Return the user + system CPU seconds of ``pid`` and every process below it (uvicorn's workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            total += (int(stats[p][11]) + int(stats[p][12])) / tick
        todo += children.get(p, [])
    return total


def measured(pid: int, phase: Callable[[], LoadResult]) -> tuple[LoadResult, float]:
    """Run ``phase``; return its result and the server's CPU microseconds per request during it."""
    before = tree_cpu_s(pid)
    result = phase()
    return result, (tree_cpu_s(pid) - before) / max(1, result.sent) * 1e6


def start_server(settings: Settings, port: int, workers: int, log: Path, *, tree: Path | None = None,
                 asgi: str = "app.api.asgi:app", extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``asgi`` under uvicorn (from checkout ``tree`` if given, for a same-run comparison)."""
    env = {**os.environ, "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "ARBITER_PARTITIONS": str(settings.partitions),
           "ARBITER_TOPIC_COMMANDS": settings.topic_commands, "ARBITER_TOPIC_EVENTS": settings.topic_events,
           "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections, "ARBITER_AUTH_SECRET": SECRET,
           "ARBITER_VAR_DIR": str(settings.var_dir), "ARBITER_MAX_BODY_BYTES": str(4 * 1024 * 1024),
           # one principal ("bench") sends everything as fast as it can: the buckets run (their cost is measured)
           # but never refuse
           "ARBITER_WRITE_RATE": "1e12", "ARBITER_WRITE_BURST": str(10**12)}
    env.update(extra_env or {})
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, "-m", "uvicorn", asgi, "--host", "127.0.0.1", "--port", str(port),
           "--workers", str(workers), "--loop", "uvloop", "--http", "httptools", "--log-level", "warning",
           "--no-access-log"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,  # noqa: S603
                                cwd=tree)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1).status_code in (200, 202):
                time.sleep(1.0 * workers)  # let every worker's lifespan finish
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"server exited: see {log}")
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"server did not start: see {log}")


def line(name: str, r: LoadResult, unit: str, per: int = 1, base: float | None = None, cpu_us: float | None = None) -> str:
    rate = r.rate * per
    ratio = f"  = {rate / base:6.1%} of raw producer" if base else ""
    codes = ", ".join(f"{k}:{v}" for k, v in sorted(r.statuses.items()))
    cpu = f"  server CPU {cpu_us:7.0f} us/request" if cpu_us is not None else ""
    return (f"{name:<28} {rate:>10,.0f} {unit}/s{ratio}{cpu}   p50 {r.pct(0.5):7.1f} ms  p99 {r.pct(0.99):7.1f} ms"
            f"   ({r.sent} requests in {r.elapsed:.1f} s; status {codes})")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.api")
    ap.add_argument("--single", type=int, default=20_000, help="single-command requests")
    ap.add_argument("--waits", type=int, default=3_000, help="requests with Prefer: wait")
    ap.add_argument("--batch-commands", type=int, default=200_000, help="commands through the batch route")
    ap.add_argument("--batch-size", type=int, default=5_000)
    ap.add_argument("--raw", type=int, default=100_000, help="commands for the raw producer rate")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    ap.add_argument("--seconds", type=float, default=30.0, help="time cap per phase")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--against", type=Path, default=None,
                    help="another checkout (e.g. a git worktree of an older commit): its API is measured in the same run")
    ap.add_argument("--routes-too", action="store_true",
                    help="also measure this tree with ARBITER_API_FAST_WRITES=false (every write through FastAPI's "
                         "routes), alternating with the default, in the same run")
    args = ap.parse_args()

    with bench_stack("bench-api-", args.partitions) as (work, s):
        run_bench(args, work, s)


@contextlib.contextmanager
def bench_stack(prefix: str, partitions: int) -> Iterator[tuple[Path, Settings]]:
    """Yield a work directory and settings with fresh topics on ``ARBITER_KAFKA_BOOTSTRAP``, or on a throwaway
    broker started here and stopped by its PID afterwards."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    bootstrap = os.environ.get("ARBITER_KAFKA_BOOTSTRAP")
    broker = None
    if not bootstrap:
        broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
        broker.start(Settings())
        bootstrap = broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    s = Settings(kafka_bootstrap=bootstrap, partitions=partitions, topic_commands=f"bench-commands-{tag}",
                 topic_events=f"bench-events-{tag}", topic_rejections=f"bench-rejections-{tag}", var_dir=work / "var")
    try:
        ensure_topics(s)
        yield work, s
    finally:
        if broker is not None:
            broker.stop()


def run_bench(args: argparse.Namespace, work: Path, s: Settings) -> None:
    server = None
    try:
        port = free_port()
        server = start_server(s, port, args.workers, work / "server.log")
        token = dev_token(s, "bench", ttl_s=3600)  # the server trusts the development issuer of its var_dir
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        print(f"# bench.api: {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}, {args.workers} uvicorn worker(s), "
              f"{args.partitions} partitions, {args.connections} connections", flush=True)

        raw = raw_producer_rate(s, args.raw)
        print(f"{'raw producer (no HTTP)':<28} {raw:>10,.0f} commands/s   ({args.raw} encode+produce+ack)", flush=True)

        bodies = [json.dumps({"id": f"o-{i}", "document": {"n": i, "title": "benchmark"}}).encode()
                  for i in range(1000)]
        def singles(at_port: int) -> LoadResult:
            return asyncio.run(run_load("127.0.0.1", at_port,
                                        lambda i: request_bytes("POST", "/objects", auth, bodies[i % 1000]),
                                        count=args.single, connections=args.connections, seconds=args.seconds))

        floor_port = free_port()
        floor = start_server(s, floor_port, args.workers, work / "bare.log", asgi="bench.api.bare:app")
        try:
            bare, bare_cpu = measured(floor.pid, lambda: singles(floor_port))
        finally:
            stop_server(floor)
        print(line("bare uvicorn endpoint", bare, "requests", base=raw, cpu_us=bare_cpu), flush=True)
        single, single_cpu = measured(server.pid, lambda: singles(port))
        print(line("single POST /objects", single, "requests", base=raw, cpu_us=single_cpu), flush=True)
        if args.against is not None:
            other_port = free_port()
            other = start_server(s, other_port, args.workers, work / "against.log", tree=args.against.resolve())
            try:
                theirs, theirs_cpu = measured(other.pid, lambda: singles(other_port))
                again, again_cpu = measured(server.pid, lambda: singles(port))
            finally:
                stop_server(other)
            print(line(f"  same, {args.against.name}", theirs, "requests", base=raw, cpu_us=theirs_cpu), flush=True)
            print(line("  same, this tree again", again, "requests", base=raw, cpu_us=again_cpu), flush=True)
        if args.routes_too:
            slow_port = free_port()
            slow = start_server(s, slow_port, args.workers, work / "routes.log",
                                extra_env={"ARBITER_API_FAST_WRITES": "false"})
            try:
                for _ in range(2):
                    theirs, theirs_cpu = measured(slow.pid, lambda: singles(slow_port))
                    print(line("  same, FastAPI routes only", theirs, "requests", base=raw, cpu_us=theirs_cpu),
                          flush=True)
                    again, again_cpu = measured(server.pid, lambda: singles(port))
                    print(line("  same, fast path again", again, "requests", base=raw, cpu_us=again_cpu), flush=True)
            finally:
                stop_server(slow)

        decider = Decider(s)
        decider.start()
        time.sleep(2)
        wait_h = {**auth, "Prefer": "wait=10"}
        waits, waits_cpu = measured(server.pid, lambda: asyncio.run(run_load(
            "127.0.0.1", port,
            lambda i: request_bytes("POST", "/objects", wait_h, json.dumps({"id": f"w-{i}", "document": {"n": i}}).encode()),
            count=args.waits, connections=args.connections, seconds=args.seconds)))
        decider.running = False
        decider.join(15)
        print(line("single + Prefer: wait", waits, "requests", base=raw, cpu_us=waits_cpu)
              + f"  [decided {decider.decided}]", flush=True)

        n_req = max(1, args.batch_commands // args.batch_size)
        items = [{"kind": "create", "object_id": f"b-{i}", "document": {"n": i}} for i in range(args.batch_size)]
        batch_body = json.dumps({"commands": items}).encode()
        batch, batch_cpu = measured(server.pid, lambda: asyncio.run(run_load(
            "127.0.0.1", port, lambda i: request_bytes("POST", "/commands:batch", auth, batch_body),
            count=n_req, connections=2, seconds=args.seconds)))
        print(line(f"batch ({args.batch_size}/request)", batch, "commands", per=args.batch_size, base=raw,
                   cpu_us=batch_cpu / args.batch_size) + " (CPU per command)", flush=True)
    finally:
        if server is not None:
            stop_server(server)


if __name__ == "__main__":
    main()
