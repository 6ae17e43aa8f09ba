"""CPU time per component from /proc: a process and all its descendants, and the whole machine for comparison.

A component's CPU is the sum over its live process tree of utime + stime + cutime + cstime (fields 14-17 of
/proc/<pid>/stat). Counting each process's reaped children too means a child that exits during the window keeps
its time: it moves from the child's own fields into its parent's cutime/cstime when reaped. A component that
leads its own session (each of ``arbiter run``'s children does) also owns every process of that session, so
a process re-parented away from the tree still counts: a shard server outlives the Python worker that
started it when Spark retires an idle worker.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    """One /proc entry: its parent, own CPU ticks, and the ticks of its reaped children."""

    ppid: int
    own: int
    children: int
    session: int = 0


def read_proc(pid: int) -> Proc | None:
    """Parse /proc/<pid>/stat, or None if the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return Proc(int(fields[1]), utime + stime, cutime + cstime, int(fields[3]))


def process_table() -> dict[int, Proc]:
    """Every process visible in /proc right now."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc = read_proc(int(entry))
            if proc is not None:
                table[int(entry)] = proc
    return table


def tree(root: int, table: dict[int, Proc]) -> list[int]:
    """``root``, all its descendants present in ``table``, and every process of the session ``root`` leads."""
    kids: dict[int, list[int]] = defaultdict(list)
    for pid, proc in table.items():
        kids[proc.ppid].append(pid)
    out: list[int] = []
    seen: set[int] = set()
    todo = [root] if root in table else []
    todo += [pid for pid, proc in table.items() if proc.session == root and pid != root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def tree_seconds(root: int, table: dict[int, Proc]) -> float:
    """CPU seconds used so far by ``root``'s process tree, reaped descendants included."""
    return sum(table[p].own + table[p].children for p in tree(root, table)) / TICK


def own_seconds(pid: int, table: dict[int, Proc]) -> float:
    """CPU seconds of ``pid`` alone (its threads, not its children)."""
    proc = table.get(pid)
    return proc.own / TICK if proc else 0.0


def machine_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine since boot, summed over all cores (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy / TICK, (busy + idle + iowait) / TICK


@dataclass
class Snapshot:
    """CPU seconds per component name at one moment (``at``, time.monotonic()), its root PID, the machine's busy seconds."""

    at: float
    seconds: dict[str, float]
    pids: dict[str, int]
    machine_busy: float
    processes: dict[str, int]


def snapshot(trees: dict[str, int], own: dict[str, int]) -> Snapshot:
    """CPU so far of each named process tree in ``trees`` and each single process in ``own``."""
    table = process_table()
    seconds = {name: tree_seconds(pid, table) for name, pid in trees.items()}
    seconds.update({name: own_seconds(pid, table) for name, pid in own.items()})
    processes = {name: len(tree(pid, table)) for name, pid in trees.items()}
    return Snapshot(time.monotonic(), seconds, {**trees, **own}, machine_seconds()[0], processes)


def used(before: Snapshot, after: Snapshot) -> tuple[dict[str, float], list[str]]:
    """CPU seconds each component used between two snapshots, and the components whose PID changed (restarted)."""
    same = [n for n in before.seconds if n in after.seconds and before.pids[n] == after.pids[n]]
    changed = [n for n in before.seconds if n not in same]
    return {n: after.seconds[n] - before.seconds[n] for n in same}, changed
