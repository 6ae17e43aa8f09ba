"""How a run is printed: a block per rate and mode as it finishes, then one table of them all for docs/benchmarks.md."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

from bench.pipeline.phase import PhaseResult

#: Components in the order they are printed; the CPU of each is its whole process tree (see bench/pipeline/cpu.py).
SHOWN = ("validator", "api", "broker", "project-db", "project-audit", "project-log", "client", "arbiter run",
         "bench (main)")
SHORT = {"project-db": "db", "project-audit": "audit", "project-log": "log", "arbiter run": "run",
         "bench (main)": "bench"}


def ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:,.0f}"


def quantiles(q: dict[str, float]) -> str:
    return "  ".join(f"{k} {ms(v)} ms" for k, v in q.items())


def counts(c: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])) or "none"


def _procs(r: PhaseResult, name: str) -> str:
    n = r.processes.get(name, 1)
    return f", {n} processes" if n > 1 else ""


def block(r: PhaseResult, raw: float | None, write: Callable[[str], None] = print) -> None:
    """Print one run's figures."""
    p, s = r.plan, r.summary
    write(f"\n== {p.rate:g}/s, {'Prefer: wait=' + format(p.prefer_wait, 'g') if p.prefer_wait else 'no Prefer (202)'}, "
          f"{p.duration:g} s, {p.clients} client process(es), load avg {os.getloadavg()[0]:.1f} ==")
    write(f"requests  {s.requests} sent at {s.sent_per_s:.1f}/s (offered {p.rate:g}/s; sends late by p99 "
          f"{ms(s.send_lag['p99'])} ms, max {ms(s.send_lag['max'])} ms; peak {s.peak_in_flight} in flight); "
          f"{s.ok} answered without error at {s.completed_per_s:.1f}/s over {s.span_s:.1f} s")
    write(f"latency   scheduled send -> HTTP answer: {quantiles(s.latency)}")
    write(f"decision  scheduled send -> decision on the topics: {quantiles(r.decision_latency)}; "
          f"all decided {r.drain_s:.1f} s after the last answer")
    write(f"answers   {counts(s.kinds)}")
    write(f"errors    {counts(s.errors)}")
    write(f"decided   {counts(r.decided)}; undecided {r.undecided}")
    cores = "  ".join(f"{SHORT.get(n, n)} {r.cores(n):.2f} ({r.cpu_s[n]:.1f} s{_procs(r, n)})" for n in SHOWN if n in r.cpu_s)
    listed = sum(r.cpu_s.values())
    write(f"CPU       cores (CPU seconds) over the {r.window_s:.1f} s window: {cores}")
    write(f"          all of these {listed / r.window_s:.2f} cores; machine busy {r.machine_busy_s / r.window_s:.2f} of "
          f"{os.cpu_count()} cores (others {(r.machine_busy_s - listed) / r.window_s:.2f})"
          + (f"; RESTARTED during the window: {', '.join(r.restarted)}" if r.restarted else ""))
    if raw:
        write(f"baseline  answered without error {s.completed_per_s:,.1f}/s = {s.completed_per_s / raw:.2%} of the raw "
              f"produce rate of the same records ({raw:,.0f}/s)")


def table(results: list[PhaseResult], raw: float | None, write: Callable[[str], None] = print) -> None:
    """Print every run as one Markdown table (latencies in ms, CPU in cores)."""
    names = [n for n in SHOWN if any(n in r.cpu_s for r in results)]
    head = ["rate", "mode", "sent/s", "done/s", "p50", "p90", "p99", "max", "errors", "decided", "undecided",
            "decision p50 / p99", *[SHORT.get(n, n) for n in names], "other", "÷ raw"]
    write("\n| " + " | ".join(head) + " |")
    write("|" + "---|" * len(head))
    for r in results:
        s = r.summary
        rejected = sum(v for k, v in r.decided.items() if k != "accepted")
        row = [f"{r.plan.rate:g}", r.plan.mode, f"{s.sent_per_s:.1f}", f"{s.completed_per_s:.1f}",
               *[ms(s.latency[k]) for k in ("p50", "p90", "p99", "max")], str(sum(s.errors.values())),
               f"{r.decided.get('accepted', 0)} acc / {rejected} rej", str(r.undecided),
               f"{ms(r.decision_latency['p50'])} / {ms(r.decision_latency['p99'])}",
               *[f"{r.cores(n):.2f}" for n in names],
               f"{(r.machine_busy_s - sum(r.cpu_s.values())) / r.window_s:.2f}",
               f"{s.completed_per_s / raw:.2%}" if raw else "-"]
        write("| " + " | ".join(row) + " |")
    if raw:
        write(f"\nraw produce baseline (same records, API producer config, no HTTP): {raw:,.0f} records/s")
