"""``python -m bench.api.changes``: the change feed's fan-out cost, server CPU per event delivered at N subscribers.

The API runs under uvicorn in a second process (``bench.api.start_server``); N clients hold ``GET /changes``
streams (one asyncio loop here, httpx); the bench writes E events straight onto the events topic (CREATED, owned
by the subscribers' principal, so every subscriber may read every one and no audit lookup is needed) and waits
until every stream has received all E. Reported per N: the server process's CPU (user + system, from /proc)
over that window divided by the E x N frames delivered, and the same per event written. Uses
``ARBITER_KAFKA_BOOTSTRAP`` if set, else starts a throwaway broker (stopped by its PID).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
from confluent_kafka import Producer

from app.api.callers.identity import dev_token
from app.local.kafka_broker import free_port
from app.settings import Settings
from bench.api.__main__ import bench_stack, start_server, stop_server, tree_cpu_s
from commands import Event, EventType
from schemas import codec


async def _subscriber(url: str, headers: dict[str, str], live: asyncio.Event, want: int,
                      got: list[int], index: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(30, read=None)) as client, \
            client.stream("GET", "/changes", headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line == ": live":
                live.set()
            elif line == "event: change":
                got[index] += 1
                if got[index] >= want:
                    return


def _produce(s: Settings, run: str, n: int) -> None:
    p = Producer({"bootstrap.servers": s.kafka_bootstrap, "linger.ms": 5})
    now = datetime.now(UTC)
    for i in range(n):
        oid = f"{run}-{i}"
        e = Event(str(uuid.uuid4()), EventType.CREATED, oid, 1, str(uuid.uuid4()), "bench", now, "bench",
                  document='{"n": 1, "title": "benchmark"}')
        p.produce(s.topic_events, codec.encode_event(e), oid.encode())
        p.poll(0)
    p.flush(30)


async def _one(url: str, s: Settings, headers: dict[str, str], pid: int, n: int, events: int) -> tuple[float, float]:
    got = [0] * n
    lives = [asyncio.Event() for _ in range(n)]
    tasks = [asyncio.create_task(_subscriber(url, headers, lives[i], events, got, i)) for i in range(n)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in lives)), 60)
    cpu0, t0 = tree_cpu_s(pid), time.monotonic()
    await asyncio.to_thread(_produce, s, uuid.uuid4().hex[:8], events)
    await asyncio.wait_for(asyncio.gather(*tasks), 600)
    return tree_cpu_s(pid) - cpu0, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.api.changes")
    ap.add_argument("--subscribers", default="1,10,100", help="comma-separated N")
    ap.add_argument("--events", type=int, default=5000, help="events written per N")
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    ns = [int(x) for x in args.subscribers.split(",")]

    with bench_stack("bench-changes-", args.partitions) as (work, s):
        _run(args, ns, work, s)


def _run(args: argparse.Namespace, ns: list[int], work: Path, s: Settings) -> None:
    server = None
    try:
        port = free_port()
        most = str(max(ns) + 1)
        server = start_server(s, port, 1, work / "server.log", extra_env={
            "ARBITER_CHANGES_MAX_PER_PRINCIPAL": most, "ARBITER_CHANGES_MAX_SUBSCRIBERS": most,
            "ARBITER_CHANGES_QUEUE_EVENTS": str(args.events + 1), "ARBITER_READ_RATE": "0"})
        headers = {"Authorization": f"Bearer {dev_token(s, 'bench', ttl_s=3600)}"}
        print(f"# bench.api.changes: {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}, {args.partitions} "
              f"partitions, {args.events} events per N", flush=True)
        for n in ns:
            cpu, wall = asyncio.run(_one(f"http://127.0.0.1:{port}", s, headers, server.pid, n, args.events))
            frames = n * args.events
            print(f"N={n:<5} {frames:>9,} frames in {wall:6.2f} s  server CPU {cpu:6.2f} s = "
                  f"{cpu / frames * 1e6:7.1f} us per event delivered, {cpu / args.events * 1e6:8.1f} us per event "
                  f"written", flush=True)
    finally:
        if server is not None:
            stop_server(server)


if __name__ == "__main__":
    main()
