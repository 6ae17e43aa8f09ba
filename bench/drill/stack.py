"""The production shape on 127.0.0.1, as separate processes on free ports: three KRaft brokers (RF 3, min ISR 2),
PostgreSQL for the read model, a Spark master with two one-core workers running the rocksdb validator, two API
replicas, two DB projection instances in one consumer group and two audit projection replicas.

Every process leads its own session and is stopped by its PID (``Stack.stop``), also when starting fails.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import SecretStr

from app.errors import SetupError
from app.local.kafka_broker import free_port
from app.local.kafka_cluster import LocalCluster
from app.local.postgres_server import LocalPostgres
from app.settings import Settings
from app.topics import ensure_topics
from bench.validator.cluster import Cluster, cluster_env, start_cluster
from bench.validator.rocks_cluster_placement import job_env

ROOT = Path(__file__).resolve().parents[2]
#: The DB projection instances' consumer group prefix (one group, ``drill-db``); each audit replica has its own.
DB_GROUP_PREFIX = "drill"


def audit_group_prefix(i: int) -> str:
    return f"drill-audit{i}"


@dataclass
class Proc:
    """One Arbiter process: how to start it again, and the running ``Popen`` (its own session)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready: Callable[[Proc], bool]
    popen: subprocess.Popen[bytes] | None = None
    seen: int = 0  # readiness lines in the log before this start (a restart appends to the same log)

    def start(self, timeout: float = 240.0) -> None:
        self.spawn()
        self.wait_ready(timeout)

    def spawn(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                                          stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT)

    def wait_ready(self, timeout: float) -> None:
        assert self.popen is not None
        deadline = time.monotonic() + timeout
        while not self.ready(self):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not come up (exit {self.popen.poll()}); log tail:\n"
                                   f"{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def kill9(self) -> int:
        """SIGKILL the process's whole session (its children too); return the PID."""
        assert self.popen is not None
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(30)
        return self.popen.pid

    def stop(self) -> None:
        p = self.popen
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(45)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def _log_says(text: str) -> Callable[[Proc], bool]:
    def ready(p: Proc) -> bool:
        return p.log.exists() and p.log.read_text(errors="replace").count(text) > p.seen
    return ready


def _healthy(url: str) -> Callable[[Proc], bool]:
    def ready(_: Proc) -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False
    return ready


@dataclass
class Stack:
    """The running shape; ``procs`` by name: validator, api1, api2, db1, db2, audit1, audit2."""

    work: Path
    settings: Settings
    brokers: LocalCluster
    postgres: LocalPostgres | None = None
    spark: Cluster | None = None
    procs: dict[str, Proc] = field(default_factory=dict)

    @property
    def api_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.procs[n].env['ARBITER_API_PORT']}" for n in ("api1", "api2")]

    def audit_dir(self, i: int) -> Path:
        return self.work / f"audit{i}"

    def restart(self, name: str) -> None:
        """Start ``name`` again after a kill (its log grows; readiness counts the new start line)."""
        p = self.procs[name]
        text = "validator started" if name == "validator" else "projection: assigned"
        p.seen = p.log.read_text(errors="replace").count(text) if p.log.exists() else 0
        p.start()

    def stop(self) -> None:
        """Stop everything started, by PID: Arbiter's processes, then Spark, PostgreSQL and the brokers."""
        for p in reversed(list(self.procs.values())):
            try:
                p.stop()
            except (ProcessLookupError, OSError):
                pass
        if self.spark is not None:
            self.spark.stop()
        if self.postgres is not None:
            self.postgres.stop()
        for node in self.brokers.nodes:
            pid = node.running_pid()
            if pid is not None:
                os.kill(pid, signal.SIGCONT)  # a paused broker cannot stop
        self.brokers.stop()


def start_stack(work: Path, say: Callable[[str], None], *, partitions: int, batch: int) -> Stack:
    """Start the shape under ``work`` (module docstring); on failure stop what was started and re-raise."""
    base = Settings(var_dir=work / "var", kafka_heap="384m", partitions=partitions, replication_factor=3,
                    min_insync_replicas=2)
    brokers = LocalCluster.from_settings(base, 3, [(free_port(), free_port()) for _ in range(3)])
    stack = Stack(work, base, brokers)
    try:
        t0 = time.monotonic()
        for node in brokers.nodes:  # the JVMs start while Spark and PostgreSQL do
            node.start(base, wait=False)
        stack.postgres = LocalPostgres(work / "postgres", port=free_port())
        stack.postgres.start()
        dsn = stack.postgres.create_database("drill")
        stack.spark = start_cluster(work, 2)
        try:
            brokers.wait_ready(240)
        except SetupError:  # on a loaded host a node can give up registering with the quorum: start it once more
            for node in brokers.nodes:
                pid = node.running_pid()
                if pid is not None and os.waitpid(pid, os.WNOHANG)[0] == pid:  # our child, exited: reaped
                    node.start(base, wait=False)
            brokers.wait_ready(240)
        secret = secrets.token_urlsafe(48)
        s = stack.settings = base.model_copy(update={"kafka_bootstrap": brokers.bootstrap, "read_model": "postgresql",
                                                     "auth_secret": SecretStr(secret)})
        ensure_topics(s)
        say(f"three brokers at {brokers.bootstrap}, topics (RF 3, min ISR 2), PostgreSQL, a Spark master and two "
            f"workers up ({time.monotonic() - t0:.0f} s)")
        env = {**cluster_env(work), "PYTHONUNBUFFERED": "1",
               "ARBITER_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "ARBITER_VAR_DIR": str(s.var_dir),
               "ARBITER_PARTITIONS": str(partitions), "ARBITER_REPLICATION_FACTOR": "3",
               "ARBITER_MIN_INSYNC_REPLICAS": "2", "ARBITER_AUTH_SECRET": secret,
               "ARBITER_READ_MODEL": "postgresql", "ARBITER_POSTGRES_DSN": dsn,
               "ARBITER_VALIDATOR_METRICS_PORT": "0",
               "ARBITER_PROJECTION_METRICS_PORTS": json.dumps({"db": 0, "audit": 0, "log": 0})}
        cli = [sys.executable, "-m", "app.cli"]
        venv = {**job_env(env, s, stack.spark.master_url, 2, batch), "ARBITER_SNAPSHOT_EVERY": "5",
                "ARBITER_SPARK_CONF": json.dumps({"spark.executor.memory": "768m", "spark.cores.max": "2",
                                                  "spark.task.maxFailures": "8"})}
        stack.procs["validator"] = Proc("validator", cli + ["validator"], venv, work / "validator.log",
                                        _log_says("validator started"))
        for i in (1, 2):
            stack.procs[f"db{i}"] = Proc(f"db{i}", cli + ["project", "db", "--group"],
                                         {**env, "ARBITER_PROJECTION_GROUP_PREFIX": DB_GROUP_PREFIX},
                                         work / f"db{i}.log", _log_says("projection: assigned"))
            stack.procs[f"audit{i}"] = Proc(f"audit{i}", cli + ["project", "audit"],
                                            {**env, "ARBITER_AUDIT_DIR": str(stack.audit_dir(i)),
                                             "ARBITER_PROJECTION_GROUP_PREFIX": audit_group_prefix(i)},
                                            work / f"audit{i}.log", _log_says("projection: assigned"))
        for i in (1, 2):
            port = free_port()
            stack.procs[f"api{i}"] = Proc(f"api{i}", cli + ["api"],
                                          {**env, "ARBITER_API_HOST": "127.0.0.1", "ARBITER_API_PORT": str(port),
                                           "ARBITER_AUDIT_DIR": str(stack.audit_dir(i))},
                                          work / f"api{i}.log", _healthy(f"http://127.0.0.1:{port}"))
        for p in stack.procs.values():  # all at once: each waits for the brokers, not for the others
            p.spawn()
        for name, p in stack.procs.items():
            p.wait_ready(420)
            say(f"{name} up (pid {p.popen.pid if p.popen else '?'}, {time.monotonic() - t0:.0f} s)")
    except BaseException:
        stack.stop()
        raise
    return stack
