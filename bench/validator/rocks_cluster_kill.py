"""``python -m bench.validator.rocks_cluster_kill``: the rocksdb backend on a standalone cluster loses nothing when a worker dies.

Starts on 127.0.0.1 (free ports): a KRaft broker (unless ARBITER_KAFKA_BOOTSTRAP is set), a Spark master and
two workers of one core each; preloads commands; runs ``python -m app.validator`` with
``ARBITER_STATE_BACKEND=rocksdb`` (small batches, back to back); as soon as outcomes appear, SIGKILLs the
second worker's whole process group (worker, executor JVM, Python workers); waits until every command has an
outcome; then checks the topics hold exactly what ``commands.decide`` predicts (identical duplicates allowed,
none divergent, none missing). Everything it started is stopped by PID.
``tests/integration/test_rocks_cluster.py`` runs it (~1 min).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.kafka_broker import LocalBroker, free_port
from app.settings import Settings
from app.topics import describe, ensure_topics
from app.validator.fold import limits_for
from app.validator.murmur2 import partition_for
from app.validator.topic_io import produce, read_all
from bench.validator.workload import commands as workload
from commands import Event, decide
from schemas import codec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from validator_cluster_proof import SPARK_HOME, start, stop, wait_for  # noqa: E402


@dataclass(frozen=True, slots=True)
class ClusterKill:
    """What one run saw: outcomes on the topics when the worker died, and the final comparison with ``decide``."""

    commands: int
    written_at_kill: int
    records: int
    duplicates: int
    divergent: int
    missing: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.divergent == 0 and self.missing == 0


def run(bootstrap: str | None, work: Path, say: Callable[[str], None] = print, *, tag: str = "rc") -> ClusterKill:
    """Run the scenario (module docstring) under ``work``; start a broker unless ``bootstrap`` is given.

    Raises ``RuntimeError`` (with the job's log tail) if the job ends or times out before every outcome is written.
    """
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(work / "logs"),
           "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    for key in [k for k in env if k.startswith("ARBITER_")]:
        del env[key]  # the job's settings are exactly the ones below, not the caller's
    procs: list[subprocess.Popen] = []
    broker, job = None, None
    t0 = time.monotonic()
    try:
        if not bootstrap:
            broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
            broker.start(Settings())
            bootstrap = broker.bootstrap
        mport = free_port()
        master_url = f"spark://127.0.0.1:{mport}"
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        procs.append(start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                            str(mport), "--webui-port", str(free_port())], work / "master.log", env))
        wait_for(work / "master.log", "I have been elected leader")
        for w in (1, 2):
            wenv = {**env, "SPARK_WORKER_DIR": str(work / f"worker{w}")}
            procs.append(start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port",
                                str(free_port()), "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g",
                                master_url], work / f"worker{w}.log", wenv))
            wait_for(work / f"worker{w}.log", "Successfully registered with master")
        say(f"master {master_url} and two workers up after {time.monotonic() - t0:.0f} s")

        s = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=4, topic_commands=f"{tag}-commands",
                     topic_events=f"{tag}-events", topic_rejections=f"{tag}-rejections", spark_master=master_url)
        ensure_topics(s)
        cmds = list(workload(300, 3000))
        produce(s, [(c.object_id.encode(), codec.encode_command(c)) for c in cmds])
        run_env = {**env, "ARBITER_KAFKA_BOOTSTRAP": bootstrap, "ARBITER_VAR_DIR": str(s.var_dir),
                   "ARBITER_PARTITIONS": "4", "ARBITER_TOPIC_COMMANDS": s.topic_commands,
                   "ARBITER_TOPIC_EVENTS": s.topic_events, "ARBITER_TOPIC_REJECTIONS": s.topic_rejections,
                   "ARBITER_SPARK_MASTER": master_url, "ARBITER_STATE_BACKEND": "rocksdb",
                   "ARBITER_MAX_OFFSETS_PER_TRIGGER": "200", "ARBITER_TRIGGER_INTERVAL": "0 seconds",
                   "ARBITER_SNAPSHOT_EVERY": "3",
                   "ARBITER_SPARK_CONF": '{"spark.executor.memory": "768m", "spark.cores.max": "2", '
                                         '"spark.task.maxFailures": "8"}'}
        job = start([sys.executable, "-m", "app.validator"], work / "job.log", run_env)

        def outcomes() -> int:  # records on both output topics, duplicates included
            return sum(t.messages for t in describe(s, [s.topic_events, s.topic_rejections]))

        def failed(why: str) -> RuntimeError:
            return RuntimeError(f"{why}; job log tail:\n{(work / 'job.log').read_text()[-3000:]}")

        deadline = time.monotonic() + 300
        while outcomes() == 0:
            if job.poll() is not None or time.monotonic() > deadline:
                raise failed("the job ended or timed out before its first outcome")
            time.sleep(0.2)
        before = outcomes()
        victim = procs[2]
        os.killpg(victim.pid, signal.SIGKILL)  # worker 2, its executor and that executor's Python workers
        victim.wait(30)
        say(f"killed worker 2 (pgid {victim.pid}) with {before} of {len(cmds)} outcomes written")
        limits, states, want = limits_for(s), {}, set()
        for c in cmds:
            d = decide(states.get(c.object_id), c, limits)
            states[c.object_id] = d.state
            topic = s.topic_events if isinstance(d.outcome, Event) else s.topic_rejections
            want.add((topic, c.object_id.encode(), codec.encode_outcome(d.outcome),
                      partition_for(c.object_id.encode(), 4)))
        deadline = time.monotonic() + 600
        while True:
            got = [(r.topic, r.key, r.value, r.partition) for t in (s.topic_events, s.topic_rejections)
                   for r in read_all(s, t)]
            if want <= set(got) or set(got) - want:
                break
            if job.poll() is not None or time.monotonic() > deadline:
                raise failed(f"the job ended or timed out with {len(set(got) & want)} of {len(want)} outcomes")
            time.sleep(3)
        seconds = time.monotonic() - t0
        say(f"outcomes complete {seconds:.0f} s after start")
        return ClusterKill(len(cmds), before, len(got), len(got) - len(set(got)), len(set(got) - want),
                           len(want - set(got)), seconds)
    finally:
        if job is not None:
            stop(job)
        for p in reversed(procs):
            stop(p)
        if broker is not None:
            broker.stop()
        say(f"stopped everything started (total {time.monotonic() - t0:.0f} s); logs in {work}")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="arbiter-rocks-cluster-"))
    try:
        r = run(os.environ.get("ARBITER_KAFKA_BOOTSTRAP"), work, lambda line: print(line, flush=True))
    except RuntimeError as e:
        print(e)
        return 1
    print(f"outcomes: {r.records} records ({r.duplicates} identical duplicates), {r.divergent} divergent, "
          f"{r.missing} missing: {'OK' if r.ok else 'FAILED'}")
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
