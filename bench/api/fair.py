"""``python -m bench.api.fair``: one principal floods the API; does another principal's latency hold? (issue 25)

One API process (uvicorn, uvloop, httptools, the default fair-share settings but for ``--write-burst``) on a
throwaway broker. A *victim* principal writes open-loop at ``--victim-rate`` (requests scheduled in advance, each on
a connection of its own as a client fleet opens them, latency from the scheduled send), first alone, then while a
*flooder* principal, in a process of its own, sends ``POST /objects`` as fast as ``--flood-connections`` keep-alive
connections can. Printed: the victim's p50/p99 in both phases and their ratio, what the flooder got (202s and 429s a
second) and the server's CPU. The fair-share test (``tests/integration/test_api_fair.py``) checks the refusals and
that the other principal is served; this measures by how much the flood slows it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from app.api.callers.identity import dev_token
from app.load.openloop import Answer, drive, summarize
from app.local.kafka_broker import LocalBroker, free_port
from app.settings import Settings
from app.topics import ensure_topics
from bench.api.__main__ import start_server, stop_server, tree_cpu_s
from bench.api.load import request_bytes, run_load


async def _one(port: int, request: bytes) -> Answer:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = head[9:12].decode()
        return Answer(status, ok=status in ("201", "202"))
    finally:
        writer.close()


def victim(port: int, token: str, rate: float, seconds: float, tag: str) -> dict[str, float]:
    """Open-loop writes of principal ``victim``, one connection per request; latency quantiles in ms."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Connection": "close"}

    def send(i: int) -> asyncio.Future[Answer]:
        body = json.dumps({"id": f"v-{tag}-{i}", "document": {"n": i}}).encode()
        return asyncio.ensure_future(_one(port, request_bytes("POST", "/objects", headers, body)))

    async def run() -> dict[str, float]:
        t0 = time.monotonic()
        samples = await drive(send, rate, range(int(rate * seconds)), t0=t0)
        s = summarize(samples, rate, t0)
        return {"p50": s.latency["p50"] * 1e3, "p99": s.latency["p99"] * 1e3, "ok": s.ok, "requests": s.requests,
                "answered_per_s": s.completed_per_s}

    return asyncio.run(run())


def flood(port: int, token: str, connections: int, seconds: float) -> None:
    """Closed-loop ``POST /objects`` of principal ``flooder`` on keep-alive connections; prints its statuses."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    bodies = [json.dumps({"id": f"f-{i}", "document": {"n": i}}).encode() for i in range(1000)]
    r = asyncio.run(run_load("127.0.0.1", port, lambda i: request_bytes("POST", "/objects", headers, bodies[i % 1000]),
                             count=10**9, connections=connections, seconds=seconds))
    print(json.dumps({"elapsed": r.elapsed, "statuses": r.statuses}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.api.fair")
    ap.add_argument("--victim-rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--flood-connections", type=int, default=64)
    ap.add_argument("--write-burst", type=int, default=1000,
                    help="ARBITER_WRITE_BURST of the server (default 50,000 would let the flooder through for its "
                         "first ~10 s); the rate is the default ARBITER_WRITE_RATE, 1,000/s")
    ap.add_argument("--flood", nargs=4, metavar=("PORT", "TOKEN", "CONNECTIONS", "SECONDS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flood:
        flood(int(args.flood[0]), args.flood[1], int(args.flood[2]), float(args.flood[3]))
        return

    work = Path(tempfile.mkdtemp(prefix="bench-fair-"))
    broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
    broker.start(Settings())
    tag = uuid.uuid4().hex[:8]
    s = Settings(kafka_bootstrap=broker.bootstrap, partitions=4, topic_commands=f"fair-commands-{tag}",
                 topic_events=f"fair-events-{tag}", topic_rejections=f"fair-rejections-{tag}", var_dir=work / "var")
    server = None
    try:
        ensure_topics(s)
        port = free_port()
        server = start_server(s, port, 1, work / "server.log", extra_env={
            "ARBITER_WRITE_RATE": str(Settings().write_rate), "ARBITER_WRITE_BURST": str(args.write_burst)})
        # the server trusts the development issuer of its var_dir
        victim_token, flood_token = dev_token(s, "victim", ttl_s=3600), dev_token(s, "flooder", ttl_s=3600)
        print(f"# bench.api.fair: {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}; victim {args.victim_rate:g} "
              f"req/s open-loop (a connection per request), flooder {args.flood_connections} keep-alive connections; "
              f"ARBITER_WRITE_RATE {Settings().write_rate:g}, ARBITER_WRITE_BURST {args.write_burst}", flush=True)
        victim(port, victim_token, args.victim_rate, 3.0, "warm")
        cpu0 = tree_cpu_s(server.pid)
        alone = victim(port, victim_token, args.victim_rate, args.seconds, "alone")
        cpu_alone = tree_cpu_s(server.pid) - cpu0
        print(f"victim alone          p50 {alone['p50']:7.1f} ms  p99 {alone['p99']:7.1f} ms  "
              f"ok {alone['ok']:.0f}/{alone['requests']:.0f}  server {cpu_alone / args.seconds:.2f} cores", flush=True)
        flooder = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "bench.api.fair", "--flood", str(port), flood_token, str(args.flood_connections),
             str(args.seconds + 4)], stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(2.0)  # the flood is on, and the flooder's burst spent
            cpu0 = tree_cpu_s(server.pid)
            flooded = victim(port, victim_token, args.victim_rate, args.seconds, "flooded")
            cpu_flooded = tree_cpu_s(server.pid) - cpu0
            out, _ = flooder.communicate(timeout=args.seconds + 60)
        finally:
            if flooder.poll() is None:
                flooder.kill()
                flooder.wait(10)
        f = json.loads(out.strip().splitlines()[-1])
        rates = {k: v / f["elapsed"] for k, v in f["statuses"].items()}
        print(f"victim under flood    p50 {flooded['p50']:7.1f} ms  p99 {flooded['p99']:7.1f} ms  "
              f"ok {flooded['ok']:.0f}/{flooded['requests']:.0f}  server {cpu_flooded / args.seconds:.2f} cores",
              flush=True)
        print("flooder               " + ", ".join(f"{k}: {v:,.0f}/s" for k, v in sorted(rates.items())), flush=True)
        print(f"victim p99 under flood / alone = {flooded['p99'] / alone['p99']:.1f}x "
              f"(p50 {flooded['p50'] / alone['p50']:.1f}x)", flush=True)
    finally:
        if server is not None:
            stop_server(server)
        broker.stop()


if __name__ == "__main__":
    main()
