"""One measured run: N client processes drive one rate in one mode; CPU per component is read around the window.

The window runs from the schedule's t0 (every client ready; with reused connections one is open) to the moment the last client has
its last answer. After it, the run waits (``drain``) until every command it sent has a decision on the topics,
so the next run starts on an empty backlog, and counts those decisions.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from app.load.openloop import QUANTILES, Sample, Summary, percentile, summarize
from app.load.workload import schedule_count
from bench.pipeline.client import ClientResult, ClientSpec, client_main, samples_of
from bench.pipeline.cpu import Snapshot, snapshot, used
from bench.pipeline.decisions import DecisionWatcher
from bench.pipeline.stack import Stack

READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Plan:
    """What to run: rate x duration requests, with ``Prefer: wait=prefer_wait`` or without (``None``: the 202 path)."""

    rate: float
    duration: float
    prefer_wait: float | None
    clients: int
    connections: int
    timeout: float
    update_share: float
    drain_timeout: float
    tag: str
    seed: int = 1
    fresh_connections: bool = False  # a new TCP connection per request (Connection: close), as a client fleet

    @property
    def mode(self) -> str:
        base = "202" if self.prefer_wait is None else f"wait={self.prefer_wait:g}"
        return base + (" fresh" if self.fresh_connections else "")


@dataclass
class PhaseResult:
    plan: Plan
    summary: Summary
    window_s: float
    cpu_s: dict[str, float]
    restarted: list[str]
    machine_busy_s: float
    processes: dict[str, int] = field(default_factory=dict)
    decided: Counter[str] = field(default_factory=Counter)
    undecided: int = 0
    decision_latency: dict[str, float] = field(default_factory=dict)
    drain_s: float = 0.0

    def cores(self, name: str) -> float:
        return self.cpu_s.get(name, float("nan")) / self.window_s if self.window_s else float("nan")


def run_phase(stack: Stack, watcher: DecisionWatcher, plan: Plan, principals: list[str], tokens: list[str]) -> PhaseResult:
    """Run ``plan`` against ``stack``; client k acts as ``principals[k]`` with ``tokens[k]``."""
    count = schedule_count(plan.rate, plan.duration)
    ctx = multiprocessing.get_context("spawn")
    procs, conns = [], []
    try:
        for k in range(plan.clients):
            spec = ClientSpec(stack.api_url, tokens[k], principals[k], f"{plan.tag}-c{k}", plan.rate, count, k,
                              plan.clients, plan.prefer_wait, plan.timeout, plan.connections, plan.update_share,
                              plan.seed, plan.fresh_connections)
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=client_main, args=(spec, child), name=f"bench-client-{k}", daemon=True)
            proc.start()
            procs.append(proc)
            conns.append(parent)
        for conn, proc in zip(conns, procs, strict=True):
            if not conn.poll(READY_TIMEOUT_S) or conn.recv() != "ready":
                raise SystemExit(f"client {proc.name} (pid {proc.pid}) did not get ready")
        t0 = time.monotonic() + 0.2
        for conn in conns:
            conn.send(t0)
        time.sleep(max(0.0, t0 - time.monotonic()))
        before = _snapshot(stack)
        results: list[ClientResult] = [_result(conn, proc, plan) for conn, proc in zip(conns, procs, strict=True)]
        after = _snapshot(stack)  # pidfiles read again: a component restarted in the window shows as such
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join(10)
    cpu_s, restarted = used(before, after)
    cpu_s["client"] = sum(r.cpu_s for r in results)
    samples: list[Sample] = sorted((s for r in results for s in samples_of(r.rows)), key=lambda s: s.index)
    result = PhaseResult(plan, summarize(samples, plan.rate, t0), after.at - before.at, cpu_s, restarted,
                         after.machine_busy - before.machine_busy, after.processes)
    # A request answered without error is on the commands topic and must be decided; a failed one may or may not be.
    expected = [s.answer.key for s in samples if s.answer.ok and s.answer.key is not None]
    result.drain_s = watcher.wait_for(expected, plan.drain_timeout)
    seen = watcher.seen
    latencies = [seen[s.answer.key][0] - s.scheduled for s in samples if s.answer.key in seen]
    result.decided = Counter(seen[s.answer.key][1] for s in samples if s.answer.key in seen)
    result.undecided = sum(1 for k in expected if k not in seen)
    result.decision_latency = {k: percentile(latencies, q) for k, q in QUANTILES.items()}
    return result


def _snapshot(stack: Stack) -> Snapshot:
    """CPU so far of every component's process tree, of ``arbiter run`` itself and of this process."""
    pids = stack.pids()
    trees = {n: p for n, p in pids.items() if n != "arbiter run"}
    return snapshot(trees, {"arbiter run": pids["arbiter run"], "bench (main)": os.getpid()})


def _result(conn: Connection, proc: BaseProcess, plan: Plan) -> ClientResult:
    """Wait for a client's result; fail if it dies or overruns the schedule by far."""
    deadline = time.monotonic() + plan.duration + plan.timeout + 120
    while not conn.poll(1.0):
        if not proc.is_alive():
            raise SystemExit(f"client {proc.name} (pid {proc.pid}) died with exit code {proc.exitcode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"client {proc.name} (pid {proc.pid}) did not finish")
    return conn.recv()
