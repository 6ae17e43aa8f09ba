"""``python -m bench.drill [--check]``: the production shape under a steady load, five faults, the oracle at the end.

Starts (``bench.drill.stack``) three brokers, PostgreSQL, a Spark master with two one-core workers running the
rocksdb validator, two API replicas, two DB projection instances in one consumer group and two audit projection
replicas; drives writes through both APIs (``bench.drill.load``); then, in order:

1. kill -9 the leader broker of the busiest commands partition, restart it ``--broker-down`` s later (30);
2. kill -9 Spark worker 2 (its executor and shard servers with it), restart it ``--worker-down`` s later;
3. kill -9 API replica 2 (clients carry on through replica 1), start it again ``--api-down`` s later;
4. kill -9 DB projection 1 and audit projection 1, start them again ``--projection-down`` s later;
5. SIGSTOP the leader broker of the busiest partition for ``--pause`` s (20), then SIGCONT.

Each fault is watched ``--observe`` s after it healed. For each it prints commands lost, divergent decisions
against ``commands.decide`` folded over the commands topic in offset order, byte-identical duplicates, 503s (and
any without Retry-After) and for how long, p50/p99 during and after, the time until every partition decides again
and until the projections catch up; then the audit replicas verify. Exits 1 if an invariant fails: a lost or
divergent command, a missing decision, a 503 without Retry-After, a read older than the reader's own accepted
write, an audit chain that does not verify or differs
between replicas, a component that could not be brought back. ``--check`` is the short form CI runs (shorter
phases, a lighter load; the same invariants, no timings asserted). Everything started is stopped by PID, also on
failure or Ctrl-C; the figures go to ``<work>/drill.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from bench.drill.load import Load, Watch
from bench.drill.stack import Stack, start_stack
from bench.drill.verdict import Fault, audit_check, catch_up, figures, high_watermarks, oracle, retrying


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def busiest_leader(stack: Stack) -> tuple[int, int]:
    """Return (partition, leader node id) of the commands partition holding the most records."""
    s = stack.settings
    hw = high_watermarks(s, (s.topic_commands,))
    partition = max(range(s.partitions), key=lambda p: hw[(s.topic_commands, p)])
    md = retrying(lambda: AdminClient({"bootstrap.servers": s.kafka_bootstrap, "log_level": 0})
                  .list_topics(s.topic_commands, timeout=10))
    return partition, md.topics[s.topic_commands].partitions[partition].leader


class Drill:
    """The faults, in order, with the load running; ``down`` names processes killed on purpose (not restarted by
    the hold loop's watch, which brings back any other that exits)."""

    def __init__(self, stack: Stack, load: Load, watch: Watch, args: argparse.Namespace) -> None:
        self.stack, self.load, self.watch, self.args = stack, load, watch, args
        self.faults: list[Fault] = []
        self.down: set[str] = set()
        self.unplanned: list[str] = []

    def hold(self, seconds: float) -> None:
        """Wait ``seconds`` while restarting any component that exited though nobody killed it."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for name, p in self.stack.procs.items():
                if name not in self.down and p.popen is not None and p.popen.poll() is not None:
                    self.unplanned.append(f"{name} exited {p.popen.returncode}")
                    say(f"{name} exited with {p.popen.returncode} unasked; starting it again")
                    self.stack.restart(name)
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def fault(self, name: str, inject: Callable[[], str], heal: Callable[[], None], down: float) -> None:
        f = Fault(name, time.monotonic())
        f.detail = inject()
        say(f"fault {len(self.faults) + 1}: {name}: {f.detail}")
        self.hold(down)
        heal()
        self.down.clear()
        f.healed = time.monotonic()
        say(f"  healed after {f.healed - f.at:.0f} s")
        f.catch_up_s = catch_up(self.stack.settings, self.args.observe + 120)
        self.hold(max(0.0, f.healed + self.args.observe - time.monotonic()))
        f.until = time.monotonic()
        self.faults.append(f)

    def run(self) -> None:
        st, a = self.stack, self.args

        def kill_leader() -> str:
            partition, leader = busiest_leader(st)
            node = st.brokers.nodes[leader - 1]
            pid = node.running_pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # our child: reaped, so its pidfile reads as not running
            self._victim = node
            return f"broker {leader} (pid {pid}), leader of commands[{partition}]"

        def restart_broker() -> None:
            self._victim.start(st.settings, wait=False)
            st.brokers.wait_ready(180)

        self.fault("broker leader kill -9", kill_leader, restart_broker, a.broker_down)

        def kill_worker() -> str:
            assert st.spark is not None
            return f"Spark worker 2 (pgid {st.spark.kill_worker(2)}) with its executor and shard servers"

        def restart_worker() -> None:
            assert st.spark is not None
            st.spark.restart_worker(2)

        self.fault("Spark worker kill -9", kill_worker, restart_worker, a.worker_down)

        def kill(*names: str) -> Callable[[], str]:
            def inject() -> str:
                self.down.update(names)
                return ", ".join(f"{n} (pid {st.procs[n].kill9()})" for n in names)
            return inject

        def restart(*names: str) -> Callable[[], None]:
            return lambda: [st.restart(n) for n in names] and None

        self.fault("API replica kill -9", kill("api2"), restart("api2"), a.api_down)
        self.fault("projection instances kill -9", kill("db1", "audit1"), restart("db1", "audit1"),
                   a.projection_down)

        def pause() -> str:
            partition, leader = busiest_leader(st)
            pid = st.brokers.nodes[leader - 1].running_pid()
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            self._paused = pid
            return f"SIGSTOP broker {leader} (pid {pid}), leader of commands[{partition}]"

        self.fault("broker SIGSTOP", pause, lambda: os.kill(self._paused, signal.SIGCONT), a.pause)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.drill", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="the short CI form: shorter phases, lighter load")
    p.add_argument("--work", type=Path, help="work directory (default: a new temporary one)")
    p.add_argument("--rate", type=float, help="writes/s over both APIs (default 40; --check 15)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--clients", type=int, help="client threads, each one write at a time (default 8; --check 4)")
    p.add_argument("--warmup", type=float, help="seconds of load before the first fault (default 30; --check 10)")
    p.add_argument("--broker-down", type=float, help="seconds before the killed broker restarts (30; --check 10)")
    p.add_argument("--worker-down", type=float, help="seconds before the killed worker restarts (30; --check 10)")
    p.add_argument("--api-down", type=float, help="seconds before the killed API replica restarts (20; --check 5)")
    p.add_argument("--projection-down", type=float, help="seconds before the killed projections restart (20; --check 5)")
    p.add_argument("--pause", type=float, help="seconds a broker stays SIGSTOPped (20; --check 8)")
    p.add_argument("--observe", type=float, help="seconds watched after each fault healed (30; --check 10)")
    a = p.parse_args(argv)
    defaults = {"rate": (40, 15), "clients": (8, 4), "warmup": (30, 10), "broker_down": (30, 10), "worker_down": (30, 10),
                "api_down": (20, 5), "projection_down": (20, 5), "pause": (20, 8), "observe": (30, 10)}
    for k, (full, check) in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, check if a.check else full)
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    work = a.work or Path(tempfile.mkdtemp(prefix="arbiter-drill-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.work is None:  # mkdtemp's 0700: PostgreSQL, run as its own user under root, must enter it (CI runs as root)
        work.chmod(0o755)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped like Ctrl-C: everything by PID
    t0 = time.monotonic()
    stack: Stack | None = None
    load: Load | None = None
    watch: Watch | None = None
    try:
        stack = start_stack(work, say, partitions=a.partitions, batch=500)
        say(f"shape up in {time.monotonic() - t0:.0f} s; load {a.rate:g} writes/s over {stack.api_urls}")
        load = Load(stack.settings, stack.api_urls, a.rate, threads=a.clients)
        watch = Watch(stack.settings)
        watch.start()
        load.start()
        drill = Drill(stack, load, watch, a)
        drill.hold(a.warmup)
        drill.run()
        load.stop()
        say(f"load stopped: {len(load.writes)} writes; waiting for every decision")
        deadline, o = time.monotonic() + 300, None
        while True:
            o = oracle(stack.settings)
            acked = {w.command_id for w in load.writes if w.outcome in ("accepted", "queued")}
            if (not o.missing and acked <= o.decided) or time.monotonic() > deadline:
                break
            drill.hold(10)
        final = catch_up(stack.settings, 300)
        watch.stop()
        for name in ("audit1", "audit2"):
            stack.procs[name].stop()
        audit = audit_check([stack.audit_dir(1), stack.audit_dir(2)])
        rows = [figures(f, load, watch, o) for f in drill.faults]
        lost = len(acked - o.decided)
        no_ra = sum(1 for r in load.retries if r.kind.endswith("503 without Retry-After"))
        read_503 = sum(1 for r in load.retries if r.kind.startswith("read 503"))
        report = {"work": str(work), "check": a.check, "rate": a.rate, "partitions": a.partitions,
                  "writes": len(load.writes), "acked": len(acked), "commands": o.commands, "outputs": o.outputs,
                  "duplicates": o.duplicates, "divergent": len(o.divergent), "missing": len(o.missing),
                  "lost": lost, "503_without_retry_after": no_ra, "reads": load.reads, "reads_answered_503": read_503,
                  "stale_reads": load.stale_reads[:5], "final_catch_up_s": final,
                  "audit": {"ok": audit.ok, "same_heads": audit.same_heads, "chains": audit.chains,
                            "records": audit.records, "problems": list(audit.problems[:5])},
                  "unplanned_restarts": drill.unplanned, "faults": rows, "seconds": round(time.monotonic() - t0)}
        (work / "drill.json").write_text(json.dumps(report, indent=2))
        for r in rows:
            say(json.dumps(r))
        ok = (lost == 0 and not o.divergent and not o.missing and no_ra == 0 and audit.ok and not load.stale_reads
              and all(v is not None for v in final.values()))
        say(f"{len(load.writes)} writes ({len(acked)} acknowledged), {o.commands} commands, {o.outputs} outputs "
            f"({o.duplicates} identical duplicates), {len(o.divergent)} divergent, {len(o.missing)} missing, "
            f"{lost} lost, {no_ra} 503 without Retry-After, {load.reads} reads ({len(load.stale_reads)} older than "
            f"the client's own accepted write); audit {'verifies' if audit.ok else 'FAILS'} "
            f"({audit.chains} chains, {audit.records} records, replicas' heads "
            f"{'identical' if audit.same_heads else 'DIFFERENT'}); unplanned restarts {drill.unplanned or 'none'}")
        say(f"{'OK' if ok else 'FAILED'}; figures in {work / 'drill.json'}")
        return 0 if ok else 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        if load is not None:
            load.stop()
        if watch is not None:
            watch.stop()
        if stack is not None:
            stack.stop()
        say(f"stopped everything started (total {time.monotonic() - t0:.0f} s); logs in {work}")


if __name__ == "__main__":
    sys.exit(main())
