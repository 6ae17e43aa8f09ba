"""A Spark standalone cluster on 127.0.0.1 for benchmarks and tests: a master and one-core workers, each like a host.

Each worker gets its own ``ARBITER_ROCKS_DIR`` (``work/workerN/rocks``), as two hosts would have two local
disks: the shard servers its executor starts keep their shards there (``app.validator.rocks.shard.host_settings``),
so a shard that Spark moves from one worker to the other must be restored from the shared checkpoint location,
as on a real cluster. ``shard_opens`` reads back where each shard was opened, at which batch and at what cost,
from the servers' stats files. Everything started is stopped by PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from app.local.kafka_broker import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from validator_cluster_proof import SPARK_HOME, start, stop, wait_for  # noqa: E402


def cluster_env(work: Path) -> dict[str, str]:
    """Return the environment for the cluster's JVMs and the job: Spark's home and logs, no caller ``ARBITER_*``."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOG_DIR": str(work / "logs"),
           "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    for key in [k for k in env if k.startswith("ARBITER_")]:
        del env[key]  # the job's settings are exactly the ones it is given, not the caller's
    return env


@dataclass
class Cluster:
    """A running master and workers; ``workers[i]`` is worker ``i + 1``'s process (its own process group)."""

    work: Path
    master_url: str
    master: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)
    rocks_dirs: list[Path] = field(default_factory=list)

    def kill_worker(self, n: int) -> int:
        """SIGKILL worker ``n``'s whole process group (worker, executor JVM, Python workers); return its pgid."""
        victim = self.workers[n - 1]
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(30)
        return victim.pid

    def restart_worker(self, n: int, memory: str = "1g") -> subprocess.Popen:
        """Start worker ``n`` again (after ``kill_worker``) on its old dirs, as a host coming back; wait until it
        registers with the master."""
        self.workers[n - 1] = _start_worker(self, n, bool(self.rocks_dirs), memory, again=True)
        return self.workers[n - 1]

    def stop(self) -> None:
        for p in reversed([self.master, *self.workers]):
            stop(p)


def _start_worker(cluster: Cluster, w: int, separate_dirs: bool, memory: str, *, again: bool = False) -> subprocess.Popen:
    """Start one-core worker ``w`` of ``cluster`` (log ``worker<w>.log``, or ``worker<w>-again.log``)."""
    work = cluster.work
    wenv = {**cluster_env(work), "SPARK_WORKER_DIR": str(work / f"worker{w}")}
    if separate_dirs:
        wenv["ARBITER_ROCKS_DIR"] = str(work / f"worker{w}" / "rocks")  # this "host"'s disk: its shard servers use it
    log = work / f"worker{w}{'-again' if again else ''}.log"
    proc = start([str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", "--host",
                  "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "1",
                  "--memory", memory, cluster.master_url], log, wenv)
    try:
        wait_for(log, "Successfully registered with master", timeout=300)  # a loaded host takes minutes
    except BaseException:
        stop(proc)
        raise
    return proc


def start_cluster(work: Path, workers: int, *, separate_dirs: bool = True, memory: str = "1g") -> Cluster:
    """Start a master and ``workers`` one-core workers; with ``separate_dirs`` each has its own local rocks dir."""
    env = cluster_env(work)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    mport = free_port()
    master = start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(mport),
                    "--webui-port", str(free_port())], work / "master.log", env)
    cluster = Cluster(work, f"spark://127.0.0.1:{mport}", master)
    try:
        wait_for(work / "master.log", "I have been elected leader", timeout=300)  # minutes on a loaded host
        for w in range(1, workers + 1):
            if separate_dirs:
                cluster.rocks_dirs.append(work / f"worker{w}" / "rocks")
            cluster.workers.append(_start_worker(cluster, w, separate_dirs, memory))
    except BaseException:
        cluster.stop()
        raise
    return cluster


@dataclass(frozen=True, slots=True)
class ShardOpen:
    """One shard server opening one shard: where (the server's socket stem), for which batch, from what, at what cost."""

    server: str
    partition: int
    batch: int
    source: str  # "local" (level on this disk), "changelogs" (caught up), "snapshot" (restored), "empty"
    ms: int
    bytes: int


def shard_opens(var_dir: Path) -> list[ShardOpen]:
    """Return every shard open the servers of ``var_dir``'s checkpoint logged, in batch order."""
    out = []
    for f in sorted((var_dir / "status" / "shards").glob("*.json")):
        try:
            stats = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for o in stats.get("opens_log", []):
            out.append(ShardOpen(f.stem, int(o["partition"]), int(o["batch"]), str(o["from"]), int(o["ms"]),
                                 int(o["bytes"])))
    return sorted(out, key=lambda o: (o.batch, o.partition, o.server))


def host_of(server: str) -> str:
    """Return the "host" of a server's socket stem (``shards-<rocks root digest>-<lane>``): its rocks root digest."""
    return server.rsplit("-", 1)[0]


def moves(opens: list[ShardOpen]) -> list[ShardOpen]:
    """Return the opens that moved a shard to another host: every open after a shard's first, on a new host."""
    where: dict[int, str] = {}
    out = []
    for o in opens:
        host = host_of(o.server)
        if o.partition in where and where[o.partition] != host:
            out.append(o)
        where[o.partition] = host
    return out
