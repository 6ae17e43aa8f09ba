"""Prove the validator runs on a Spark standalone cluster: master + one worker from the pyspark distribution.

Run: ``.venv/bin/python scripts/validator_cluster_proof.py`` (takes a few minutes on 2 cores).
Starts, on 127.0.0.1 with free ports: a KRaft broker (unless ARBITER_KAFKA_BOOTSTRAP is set), a Spark
master and one worker (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``);
preloads commands, runs ``arbiter validator --available-now`` with ``ARBITER_SPARK_MASTER=spark://...``
as a separate process (the same entry point a spark-submit would run), checks the outputs byte for byte
against ``commands.decide`` run directly, and stops everything it started by PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyspark  # noqa: TID251 - only to find the distribution (SPARK_HOME)

from app.local.kafka_broker import LocalBroker, free_port
from app.settings import Settings
from app.topics import ensure_topics
from app.validator.fold import limits_for
from app.validator.murmur2 import partition_for
from app.validator.topic_io import produce, read_all
from bench.validator.workload import commands as workload
from commands import Event, decide
from schemas import codec

SPARK_HOME = Path(pyspark.__file__).parent


def start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    print("$", " ".join(cmd), flush=True)
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,  # noqa: S603, SIM115
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the JVM and nothing else
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wait_for(log: Path, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise SystemExit(f"{text!r} not seen in {log} within {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="arbiter-cluster-"))
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(work / "logs"),
           "SPARK_WORKER_DIR": str(work / "worker"), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    procs: list[subprocess.Popen] = []
    broker = None
    bootstrap = os.environ.get("ARBITER_KAFKA_BOOTSTRAP")
    t0 = time.monotonic()
    try:
        if not bootstrap:
            broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
            broker.start(Settings())
            bootstrap = broker.bootstrap
        mport, wport = free_port(), free_port()
        master_url = f"spark://127.0.0.1:{mport}"
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        procs.append(start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                            str(mport), "--webui-port", str(free_port())], work / "master.log", env))
        wait_for(work / "master.log", "I have been elected leader")
        procs.append(start([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port",
                            str(wport), "--webui-port", str(free_port()), "--cores", "2", "--memory", "2g",
                            master_url], work / "worker.log", env))
        wait_for(work / "worker.log", "Successfully registered with master")
        print(f"master {master_url} and one worker up after {time.monotonic() - t0:.0f} s", flush=True)

        s = Settings(kafka_bootstrap=bootstrap, var_dir=work / "var", partitions=4, topic_commands="cluster-commands",
                     topic_events="cluster-events", topic_rejections="cluster-rejections", spark_master=master_url)
        ensure_topics(s)
        cmds = list(workload(200, 400))
        produce(s, [(c.object_id.encode(), codec.encode_command(c)) for c in cmds])

        run_env = {**env, "ARBITER_KAFKA_BOOTSTRAP": bootstrap, "ARBITER_VAR_DIR": str(s.var_dir),
                   "ARBITER_PARTITIONS": "4", "ARBITER_TOPIC_COMMANDS": s.topic_commands,
                   "ARBITER_TOPIC_EVENTS": s.topic_events, "ARBITER_TOPIC_REJECTIONS": s.topic_rejections,
                   "ARBITER_SPARK_MASTER": master_url,
                   "ARBITER_SPARK_CONF": '{"spark.executor.memory": "1g", "spark.cores.max": "2"}'}
        t1 = time.monotonic()
        job = subprocess.run([sys.executable, "-m", "app.validator", "--available-now", "--timeout", "600"],
                             env=run_env, capture_output=True, text=True, timeout=900, check=False)
        print(f"validator on the cluster exited {job.returncode} after {time.monotonic() - t1:.0f} s", flush=True)
        for line in job.stderr.splitlines():
            if "arbiter.validator" in line:
                print("  " + line)
        if job.returncode != 0:
            print(job.stderr[-4000:])
            return 1

        limits, states, want = limits_for(s), {}, Counter()
        for c in cmds:
            d = decide(states.get(c.object_id), c, limits)
            states[c.object_id] = d.state
            topic = s.topic_events if isinstance(d.outcome, Event) else s.topic_rejections
            want[(topic, c.object_id.encode(), codec.encode_outcome(d.outcome),
                  partition_for(c.object_id.encode(), 4))] += 1
        got = Counter((r.topic, r.key, r.value, r.partition) for t in (s.topic_events, s.topic_rejections)
                      for r in read_all(s, t))
        ran_on = "app-" in (work / "worker.log").read_text() and any((work / "worker").glob("app-*/*/stderr"))
        print(f"outcomes: {sum(got.values())} records, identical to decide run directly: {got == want}; "
              f"executor ran on the standalone worker: {ran_on}")
        return 0 if got == want and ran_on else 1
    finally:
        for p in reversed(procs):
            stop(p)
        if broker is not None:
            broker.stop()
        print(f"stopped master, worker{' and broker' if broker else ''} (total {time.monotonic() - t0:.0f} s); "
              f"logs in {work}")


if __name__ == "__main__":
    sys.exit(main())
