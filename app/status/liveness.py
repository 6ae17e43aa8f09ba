"""A container healthcheck: is the progress file fresh, and written by the process running now (not a past run)?

``python3 -m app.status.liveness /data/status/validator-progress.json`` exits 0 when the file was modified after
the container's main process (PID 1) started and at most ``--max-age`` seconds ago, else 1 with the reason. The
validator and the archive publish a progress per micro-batch and touch the file every ``HEARTBEAT_S`` while their
query is active (app/validator/progress.py), so the age tells a live driver from a dead or hung one, and the start
time tells a file this run wrote from one left on the volume by the previous run (docker-compose.yml's
healthchecks; issue 38 item 4: a crash-looping validator was reported healthy by a file that merely existed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

#: Default of ``--max-age``: a few heartbeats (HEARTBEAT_S), so one slow poll is not a failure.
MAX_AGE_S = 60.0


def started_at(pid: int, proc: Path = Path("/proc")) -> float:
    """Return when process ``pid`` started, in seconds since the epoch (Linux: /proc/<pid>/stat and /proc/stat)."""
    stat = (proc / str(pid) / "stat").read_text()
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime: clock ticks after boot
    boot = next(int(line.split()[1]) for line in (proc / "stat").read_text().splitlines() if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def problem(path: Path, since: float, max_age_s: float, now: float) -> str | None:
    """Return why ``path`` is not a fresh heartbeat of a process started at ``since``, or None if it is."""
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return f"{path} does not exist yet"
    # btime and starttime have a resolution of a second and a clock tick: allow one second of slack.
    if mtime < since - 1:
        return f"{path} was written {since - mtime:.0f} s before this process started (a previous run's)"
    if now - mtime > max_age_s:
        return f"{path} was last written {now - mtime:.0f} s ago (more than {max_age_s:.0f} s)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m app.status.liveness", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--max-age", type=float, default=MAX_AGE_S, help="seconds (default %(default)s)")
    parser.add_argument("--pid", type=int, default=1, help="the process whose run the file must come from")
    args = parser.parse_args(argv)
    why = problem(args.path, started_at(args.pid), args.max_age, time.time())
    if why is not None:
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
