"""``python -m bench.validator.batch_cost``: the validator's CPU per second at low, fixed command rates.

Starts ``python -m app.validator`` (the process ``arbiter run`` starts) as a child with its own topics, var dir and
checkpoint, once per configuration and round, alternating configurations round by round, and feeds it
open-loop at each ``--rates`` (command i sent at t0 + i/rate from a producer in this process). Per rate it
reports CPU seconds per second of the validator's process tree split into the driver's Python process, the
Spark JVM (with the processes it forks and reaps) and the Python workers (the daemon, its workers and the ones
it reaped), micro-batches per second and their mean duration (offset-log write to commit-log write, from the
checkpoint's files, so it needs no listener), and the decision latency from each command's scheduled send.

A configuration is ``label`` or ``label:NAME=VALUE;NAME=VALUE``: environment variables for the validator, e.g.
``t1s:ARBITER_TRIGGER_INTERVAL=1 second``; ``TREE=/path`` runs another source tree's code (e.g. a ``git archive``
of an earlier commit, with ``.cache`` linked to this tree's): the validator starts with that directory as its
working directory and ``PYTHONPATH``, so its driver, its JVM and the Python workers all import from it
(``python -m`` puts the working directory first on ``sys.path``, so ``PYTHONPATH`` alone is not enough).
``MODULE=bench.validator.floor_proc`` runs that module instead of ``app.validator``: Spark's floor, the validator's
query shape with an identity Python step (``FLOOR_PYTHON=0``: no Python; ``FLOOR_ASYNC=1``: asynchronous progress
tracking), so the validator's cost at a rate can be read beside what the micro-batch machinery alone costs.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from app.settings import Settings
from app.signing import signer_for
from app.topics import ensure_topics
from app.validator.topic_io import producer
from bench.harness import throwaway_broker
from bench.validator.workload import records
from schemas import codec

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, str, float, int] | None:
    """Return (parent pid, command name, CPU seconds of the process and its reaped children, session) or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1:raw.rindex(")")]
    f = raw.rsplit(")", 1)[1].split()
    return int(f[1]), name, (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TICK, int(f[3])


def tree_cpu(root: int) -> dict[str, float]:
    """Return the CPU seconds of ``root``'s process tree by part: driver (root), jvm (java), workers (the rest)."""
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (s := _stat(int(d))) is not None:
            procs[int(d)] = s
    parts: dict[str, float] = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    for pid, (_, name, cpu, session) in procs.items():
        p, chain = pid, []
        while p in procs and p != root:
            chain.append(p)
            p = procs[p][0]
        if p != root and session != root:  # a shard server re-parented away keeps the validator's session
            continue
        if pid == root:
            parts["driver"] += cpu
        elif name == "java":
            parts["jvm"] += cpu
            for kind, t in jvm_threads(pid).items():
                parts[kind] = parts.get(kind, 0.0) + t
        else:
            parts["workers"] += cpu
    return parts


JVM_THREADS = (("jit", "CompilerThre"), ("gc", "G1 "), ("gc", "GC Thread"), ("tasks", "Executor task"),
               ("stream", "stream executi"), ("listeners", "spark-listener"))


def jvm_threads(pid: int) -> dict[str, float]:
    """Return the live threads' CPU seconds of JVM ``pid`` for a few kinds (JIT compilers, GC, tasks, ...)."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        f = raw.rsplit(")", 1)[1].split()
        for kind, prefix in JVM_THREADS:
            if name.startswith(prefix) or (prefix == "CompilerThre" and "CompilerThre" in name):
                out[f"jvm.{kind}"] = out.get(f"jvm.{kind}", 0.0) + (int(f[11]) + int(f[12])) / TICK
                break
    return out


@dataclass
class Config:
    label: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Config:
        label, _, rest = text.partition(":")
        env = dict(kv.split("=", 1) for kv in rest.split(";") if kv)
        return cls(label, env)


class Outcomes:
    """Consume the events and rejections topics in a thread; remember when each command's outcome was seen."""

    def __init__(self, s: Settings) -> None:
        self.seen: dict[str, float] = {}
        self.consumer = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": f"cost-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "log_level": 0, "fetch.wait.max.ms": 5})
        self.consumer.assign([TopicPartition(t, p, 0) for t in (s.topic_events, s.topic_rejections)
                              for p in range(s.partitions)])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(num_messages=1000, timeout=0.05):
                if m.error() is None and m.value() is not None:
                    self.seen.setdefault(_command_id(m.value()), time.perf_counter())

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.consumer.close()


def _command_id(value: bytes) -> str:
    """Return the command id of an outcome record, or of a command record (Spark's floor copies commands)."""
    try:
        return codec.decode_outcome(value).command_id
    except Exception:  # noqa: BLE001 - not an outcome: the floor's copy of the command
        return codec.decode_command(value).command_id


def last_batch(checkpoint: Path) -> int:
    """Return the id of the last batch in the commit log (-1 before the first).

    Batches are counted as the difference of two of these, never by listing the log: Spark keeps only the last
    ``spark.sql.streaming.minBatchesToRetain`` (100) files, so at 8 batches a second a 30 s window's listing
    holds at most 100 of its ~250 batches (until 2026-11-26 this benchmark counted the listing and so reported
    at most 3.3 batches a second, and a CPU per batch up to 2.5 times too high).
    """
    ids = [int(c.name) for c in (checkpoint / "commits").glob("[0-9]*") if c.name.isdigit()]
    return max(ids, default=-1)


def batches(checkpoint: Path, t0: float, t1: float) -> list[float]:
    """Return the durations (s) of the batches committed between wall times ``t0`` and ``t1`` that the log still
    holds (a sample: see ``last_batch``)."""
    out = []
    for c in (checkpoint / "commits").glob("[0-9]*"):
        done = c.stat().st_mtime
        o = checkpoint / "offsets" / c.name
        if t0 <= done < t1 and o.exists():
            out.append(done - o.stat().st_mtime)
    return out


def _pct(values: list[float], q: float) -> float:
    """Return the ``q`` quantile of sorted ``values`` in ms (nan if empty)."""
    return values[min(len(values) - 1, int(len(values) * q))] * 1000 if values else float("nan")


def run_config(cfg: Config, base: Settings, work: Path, recs: list[tuple[bytes, bytes]], rates: list[float],
               seconds: float, warm: int, settle: float) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    s = base.model_copy(update={"topic_commands": f"cost-c-{tag}", "topic_events": f"cost-e-{tag}",
                                "topic_rejections": f"cost-r-{tag}", "var_dir": work / f"var-{tag}"})
    ensure_topics(s)
    checkpoint = s.path(s.var_dir) / "checkpoints" / "validator"
    env = {**os.environ, "ARBITER_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "ARBITER_TOPIC_COMMANDS": s.topic_commands,
           "ARBITER_TOPIC_EVENTS": s.topic_events, "ARBITER_TOPIC_REJECTIONS": s.topic_rejections,
           "ARBITER_VAR_DIR": str(s.var_dir), "ARBITER_PARTITIONS": str(s.partitions),
           "PYSPARK_PYTHON": sys.executable, **cfg.env}
    log = open(work / f"validator-{cfg.label}-{tag}.log", "wb")  # noqa: SIM115 - closed below
    tree = env.pop("TREE", None)
    module = env.pop("MODULE", "app.validator")
    if tree is not None:
        env["PYTHONPATH"] = tree
    proc = subprocess.Popen([sys.executable, "-m", module], env=env, stdout=log,  # noqa: S603
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=tree)
    outcomes = Outcomes(s)
    prod = producer(s)
    signer = signer_for(s)  # the validator rejects unsigned commands (app/signing.py)
    lines = []
    try:
        pos = 0
        for key, value in recs[:warm]:
            prod.produce(s.topic_commands, key=key, value=value, headers=signer.headers(key, value))
        prod.flush(30)
        pos = warm
        deadline = time.monotonic() + 180
        while len(outcomes.seen) < warm:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{cfg.label}: validator did not decide the warm-up (see {log.name})")
            time.sleep(0.2)
        # Settle at the highest rate: a fresh JVM spends its first minutes JIT-compiling Spark (~0.5 core at first).
        n = int(max(rates) * settle)
        for key, value in recs[pos:pos + n]:
            at = time.perf_counter() + 1 / max(rates)
            prod.produce(s.topic_commands, key=key, value=value, headers=signer.headers(key, value))
            while (now := time.perf_counter()) < at:
                prod.poll(min(at - now, 0.05))
        pos += n
        time.sleep(2)
        for rate in rates:
            n = int(rate * seconds)
            chunk = recs[pos:pos + n]
            pos += n
            sent: dict[str, float] = {}
            c0, w0, t0 = tree_cpu(proc.pid), time.time(), time.perf_counter()
            b0 = last_batch(checkpoint)
            for i, (key, value) in enumerate(chunk):
                at = t0 + i / rate
                while (now := time.perf_counter()) < at:
                    prod.poll(min(at - now, 0.05))
                prod.produce(s.topic_commands, key=key, value=value, headers=signer.headers(key, value))
                sent[codec.decode_command(value).command_id] = at
                prod.poll(0)
            while (now := time.perf_counter()) < t0 + seconds:
                prod.poll(min(t0 + seconds - now, 0.05))
            c1, w1, dt = tree_cpu(proc.pid), time.time(), time.perf_counter() - t0
            nbatch = last_batch(checkpoint) - b0
            prod.flush(30)
            end = time.monotonic() + 30
            while any(c not in outcomes.seen for c in sent) and time.monotonic() < end:
                time.sleep(0.05)
            lat = sorted(outcomes.seen[c] - at for c, at in sent.items() if c in outcomes.seen)
            missing = len(sent) - len(lat)
            durs = batches(checkpoint, w0, w1)
            cpu = {k: (c1.get(k, 0.0) - c0.get(k, 0.0)) / dt for k in c0.keys() | c1.keys()}
            total = cpu["jvm"] + cpu["workers"] + cpu["driver"]
            jvm = " ".join(f"{k[4:]} {cpu.get(k, 0.0):.3f}" for k in sorted(cpu) if k.startswith("jvm."))
            lines.append(
                f"{cfg.label:>10} {rate:>6g}/s  cpu {total:.3f} (jvm {cpu['jvm']:.3f} [{jvm}] workers "
                f"{cpu['workers']:.3f} driver {cpu['driver']:.3f})  per batch {total / max(nbatch / dt, 1e-9) * 1000:.0f} "
                f"ms  batches {nbatch / dt:.2f}/s mean "
                f"{statistics.mean(durs) * 1000 if durs else float('nan'):.0f} ms  latency p50 {_pct(lat, 0.5):.0f} "
                f"p99 {_pct(lat, 0.99):.0f} ms{f'  MISSING {missing}' if missing else ''}")
            print(lines[-1], flush=True)
    finally:
        outcomes.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the validator's own process group: driver, JVM, Python workers
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.batch_cost")
    ap.add_argument("--config", action="append", default=[], help="label[:NAME=VALUE;...] (repeat); default: base")
    ap.add_argument("--rates", default="1,10,100", help="commands/s, comma-separated, each for --seconds")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2, help="rounds; each runs every configuration once, in turn")
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--settle", type=float, default=60, help="seconds fed at the highest rate before measuring")
    ap.add_argument("--bootstrap", help="an existing broker (default: a throwaway broker)")
    args = ap.parse_args()
    configs = [Config.parse(c) for c in args.config] or [Config("base")]
    rates = [float(r) for r in args.rates.split(",")]
    recs = records(args.objects, args.warm + int(sum(rates) * args.seconds + max(rates) * args.settle) + 10)
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-cost-"))
    print(f"{len(configs)} configurations x {args.rounds} rounds, rates {rates} for {args.seconds:g} s each, "
          f"{args.partitions} partitions; logs in {work}", flush=True)
    results: dict[str, list[str]] = {}
    with throwaway_broker(work) as broker:
        base = Settings(kafka_bootstrap=args.bootstrap or broker.bootstrap, partitions=args.partitions)
        for r in range(args.rounds):
            for cfg in configs if r % 2 == 0 else reversed(configs):
                results.setdefault(cfg.label, []).extend(run_config(cfg, base, work, recs, rates, args.seconds, args.warm,
                                                                     args.settle))
    print("\nall runs, by configuration:")
    for label in results:
        print("\n".join(sorted(results[label], key=lambda line: float(line.split()[1].rstrip("/s")))))


if __name__ == "__main__":
    main()
