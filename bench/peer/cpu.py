"""CPU seconds by component of this process's tree: Spark JVM, Python workers, shard servers, broker, bench."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from bench.pipeline.cpu import TICK, process_table, tree


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def component(pid: int, cmdline: str) -> str:
    """Name the part of the benchmark a process is."""
    if pid == os.getpid():
        return "bench"
    if "app.validator.rocks.server" in cmdline:
        return "shard_servers"
    if cmdline.startswith("java") or "/java " in cmdline.split(" -", 1)[0] + " ":
        return "spark_jvm" if "spark" in cmdline.lower() else "broker"
    return "python_workers"


def by_component() -> Counter[str]:
    """Return CPU seconds so far (own and reaped children's) of this process's tree and session, by component."""
    table = process_table()
    out: Counter[str] = Counter()
    for pid in tree(os.getpid(), table):
        proc = table[pid]
        out[component(pid, _cmdline(pid))] += (proc.own + proc.children) / TICK
    return out


def delta(before: Counter[str], after: Counter[str]) -> dict[str, float]:
    """Return ``after - before`` per component (processes that exited in between are lost unless reaped)."""
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 2) for k in sorted(after.keys() | before.keys())}
