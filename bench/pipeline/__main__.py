"""``python -m bench.pipeline``: the whole stack under open-loop HTTP load at fixed rates, with and without Prefer: wait.

Starts ``arbiter run --no-scenario`` in a throwaway var dir on free ports, waits for the first decision (Spark's
Python workers start with the first micro-batch) and a warm-up, measures the raw produce rate of the same records
as the same-run baseline, then runs every rate in every mode and prints, per run, rates, latency from the
scheduled send, errors, decisions and CPU per component; then one table of all runs. Everything it started is
stopped by PID at the end, on Ctrl-C and on errors. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from app.api.callers.identity import dev_token
from bench.pipeline.baseline import raw_produce_rate
from bench.pipeline.decisions import DecisionWatcher
from bench.pipeline.floor import floor_line, measure_floor
from bench.pipeline.phase import PhaseResult, Plan, run_phase
from bench.pipeline.report import block, table
from bench.pipeline.stack import Stack


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="100,300,500,1000", help="requests/s to offer, comma-separated")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of schedule per rate and mode")
    ap.add_argument("--mode", default="wait,202", help="'wait' (Prefer: wait=<--prefer-wait>) and/or '202' (none)")
    ap.add_argument("--prefer-wait", type=float, default=10.0, help="seconds asked for in Prefer: wait")
    ap.add_argument("--clients", type=int, default=1, help="client processes sharing each schedule")
    ap.add_argument("--connections", type=int, default=1000, help="most HTTP connections per client process")
    ap.add_argument("--connect", default="reuse", choices=["reuse", "fresh"],
                    help="reuse: keep-alive connections, opened on demand and reused; fresh: a new connection per "
                         "request (Connection: close), as a fleet of clients that each connect on demand")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per request (default prefer-wait + 20; 30 for 202)")
    ap.add_argument("--update-share", type=float, default=0.5, help="share of updates (of the client's own objects)")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of unmeasured load at the lowest rate first")
    ap.add_argument("--drain", type=float, default=120.0, help="most seconds to wait for a run's last decisions")
    ap.add_argument("--raw", type=int, default=50_000, help="records for the raw produce baseline (0: skip)")
    ap.add_argument("--work", type=Path, default=None, help="parent of the throwaway directory (default: system temp)")
    ap.add_argument("--tree", type=Path, default=None,
                    help="run another checkout's stack (e.g. a worktree of an older commit) with this tree's clients")
    ap.add_argument("--floor", action="store_true",
                    help="after the phases, measure Spark's own floor (Kafka -> identity Python step -> Kafka) at each "
                         "rate on the stack's broker, and print Prefer: wait p50 over it (bench/pipeline/floor.py)")
    ap.add_argument("--keep", action="store_true", help="keep the throwaway directory (logs, data) at the end")
    args = ap.parse_args(argv)
    args.rate_list = [float(r) for r in args.rates.split(",") if r.strip()]
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    if not args.rate_list or any(r <= 0 for r in args.rate_list) or not set(args.modes) <= {"wait", "202"}:
        ap.error("--rates needs positive numbers; --mode takes wait and/or 202")
    return args


def plan(args: argparse.Namespace, rate: float, duration: float, mode: str, tag: str) -> Plan:
    wait = args.prefer_wait if mode == "wait" else None
    timeout = args.timeout or ((wait or 10.0) + 20.0)
    return Plan(rate, duration, wait, args.clients, args.connections, timeout, args.update_share, args.drain, tag,
                fresh_connections=args.connect == "fresh")


def legacy_token(secret: str, principal: str, ttl_s: int) -> str:
    """A token of Arbiter before issue 27 (``base64url(json{sub,iat,exp}).base64url(hmac_sha256)``), for ``--tree``
    checkouts from before its JWTs: the same client measures both trees."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")

    iat = int(time.time())
    payload = b64(json.dumps({"sub": principal, "iat": iat, "exp": iat + ttl_s}, separators=(",", ":")).encode())
    return f"{payload}.{b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())}"


def token_for(stack: Stack, tree: Path | None, principal: str) -> str:
    """A day's token for ``principal`` that ``stack`` accepts: its own issuer's, or the old HMAC kind."""
    if tree is not None and not (tree / "app" / "api" / "local_issuer.py").exists():
        return legacy_token(stack.secret, principal, 24 * 3600)
    return dev_token(stack.settings(), principal, ttl_s=24 * 3600)


def first_decision(stack: Stack, watcher: DecisionWatcher, token: str, timeout: float = 300.0) -> float:
    """Send one create and wait for its decision: the first micro-batch starts Spark's Python workers."""
    key, start = f"first-{uuid.uuid4().hex[:8]}", time.monotonic()
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key, "Prefer": "wait=30"}
    r = httpx.post(f"{stack.api_url}/objects", headers=headers, timeout=60, json={"id": key, "document": {}})
    if r.status_code not in (201, 202):
        raise SystemExit(f"the first create was answered {r.status_code}: {r.text[:300]}")
    watcher.wait_for([key], timeout)
    if key not in watcher.seen:
        raise SystemExit(f"no decision for the first command within {timeout:.0f}s; see {stack.var / 'logs'}")
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # Ctrl-C must work even if SIGINT was inherited as ignored (started in the background by a script), and
    # kill <pid> cleans up as Ctrl-C does.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-pipeline-", dir=args.work))
    print(f"# bench.pipeline: {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}; rates {args.rates}, "
          f"modes {args.mode}, {args.duration:g} s each, {args.clients} client process(es); work dir {work}", flush=True)
    stack: Stack | None = None
    watcher: DecisionWatcher | None = None
    ok = False
    try:
        stack = Stack.start(work, say=lambda m: print(m, flush=True), tree=args.tree.resolve() if args.tree else None)
        watcher = DecisionWatcher(stack.settings())
        watcher.start()
        principals = [f"bench-{k}" for k in range(args.clients)]
        tokens = [token_for(stack, args.tree, p) for p in principals]
        print(f"first decision after {first_decision(stack, watcher, tokens[0]):.1f}s", flush=True)
        run_id = uuid.uuid4().hex[:6]
        if args.warmup > 0:
            warm = run_phase(stack, watcher, plan(args, min(args.rate_list), args.warmup, args.modes[0], f"{run_id}-w"),
                             principals, tokens)
            print(f"warm-up: {warm.summary.ok} of {warm.summary.requests} answered without error at "
                  f"{min(args.rate_list):g}/s; p99 {warm.summary.latency['p99'] * 1000:.0f} ms", flush=True)
        raw = raw_produce_rate(stack.settings(), args.raw) if args.raw else None
        if raw:
            print(f"raw produce baseline: {args.raw} records at {raw:,.0f}/s (same records, API producer config)",
                  flush=True)
        results: list[PhaseResult] = []
        for n, (rate, mode) in enumerate((r, m) for r in args.rate_list for m in args.modes):
            print(f"\nrunning {rate:g}/s, {mode}, {args.duration:g} s ...", flush=True)
            results.append(run_phase(stack, watcher, plan(args, rate, args.duration, mode, f"{run_id}-{n}"),
                                     principals, tokens))
            block(results[-1], raw, write=lambda m: print(m, flush=True))
        table(results, raw)
        if args.floor:
            print("\nmeasuring Spark's floor on the stack's broker (the stack idles) ...", flush=True)
            for f in measure_floor(stack.settings(), work, args.rate_list, args.duration):
                print(floor_line(f), flush=True)
                for r in results:
                    if r.plan.rate == f.rate and r.plan.prefer_wait is not None:
                        print(f"  Prefer: wait p50 at {f.rate:g}/s = {r.summary.latency['p50'] * 1000:,.0f} ms = "
                              f"{r.summary.latency['p50'] / f.latency['p50']:.2f}x the floor's p50", flush=True)
        ok = True
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        if watcher is not None:
            watcher.stop()
        if stack is not None:
            print("stopping the pipeline ...", flush=True)
            stack.stop()
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work} (logs under var/logs)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
