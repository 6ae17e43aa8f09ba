"""A KRaft Kafka broker on 127.0.0.1 (one node alone, or one of a local cluster's), from Maven Central jars, stopped
by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from app.errors import SetupError
from app.local.jars import kafka_classpath
from app.run.pidfile import alive, running_pid
from app.settings import Settings

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


#: Stop the JIT at C1: a JVM that lives seconds to minutes spends less CPU compiling (a test broker's start: 3.3-4.0
#: CPU s instead of 5.4-6.8, measured by /proc/<pid>/stat at readiness on 2 cores).
C1_ONLY = ("-XX:TieredStopAtLevel=1",)


def free_port() -> int:
    """Ask the kernel for a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def java_binary() -> str:
    """Find Java 17+ or say clearly that it is missing."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise SetupError("Java 17 or newer is required (apt install openjdk-17-jre-headless) and was not found")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr  # noqa: S603
    try:
        major = int(out.split('"')[1].split(".")[0])
    except (IndexError, ValueError) as e:
        raise SetupError(f"could not read the Java version from: {out!r}") from e
    if major < 17:
        raise SetupError(f"Java 17 or newer is required; found {major} at {java}")
    return java


@dataclass
class LocalBroker:
    """One KRaft broker+controller; its data, config, log and pidfile live under ``directory``."""

    directory: Path
    port: int = 9092
    controller_port: int = 9093
    heap: str = "768m"
    node_id: int = 1
    voters: str = ""  # controller.quorum.voters of a cluster (app.local.kafka_cluster); "" = this node alone
    cluster_id: str = ""  # the id a cluster's nodes are formatted with; "" = a new one
    internal_replicas: int = 1  # replicas of Kafka's own topics (consumer offsets, transaction state)
    jit: str = "c2"  # Settings.kafka_jit: "c1" stops the broker's JIT at C1 (cheaper to start)

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalBroker:
        return cls(settings.kafka_dir, settings.kafka_port, settings.kafka_controller_port, settings.kafka_heap,
                   jit=settings.kafka_jit)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.directory / "broker.pid"

    @property
    def logfile(self) -> Path:
        return self.directory / "server.log"

    def _properties(self) -> str:
        data = self.directory / "data"
        return "\n".join([
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            f"controller.quorum.voters={self.voters or f'{self.node_id}@127.0.0.1:{self.controller_port}'}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={data}",
            "num.partitions=8",
            f"offsets.topic.replication.factor={self.internal_replicas}",
            "offsets.topic.num.partitions=8",
            f"transaction.state.log.replication.factor={self.internal_replicas}",
            f"transaction.state.log.min.isr={min(2, self.internal_replicas)}",
            f"share.coordinator.state.topic.replication.factor={self.internal_replicas}",
            f"share.coordinator.state.topic.min.isr={min(2, self.internal_replicas)}",
            "group.initial.rebalance.delay.ms=0",
            # Lets a client ask for a session as short as 1 s (the default floor is 6 s): the validator lease's
            # takeover after a crashed holder is one session timeout, which the lease tests keep at 2 s.
            "group.min.session.timeout.ms=1000",
            "auto.create.topics.enable=false",
            # How often the broker deletes segments past retention (Kafka's default: 5 min). 2 s costs a scan of
            # segment metadata, and lets a test watch retention delete a topic's early segments (tests/integration/
            # test_archive.py) without waiting minutes.
            "log.retention.check.interval.ms=2000",
            "log.flush.interval.messages=9223372036854775807",
            "",
        ])

    def running_pid(self) -> int | None:
        """The PID in the pidfile if that process is alive, else None (a stale pidfile is removed)."""
        return running_pid(self.pidfile)

    def start(self, settings: Settings, timeout: float = 90.0, *, wait: bool = True) -> int:
        """Format storage on first use, start the broker, wait until it answers metadata (unless not ``wait``: a
        cluster's node cannot answer before a majority of its controllers runs); return its PID."""
        pid = self.running_pid()
        if pid is not None:
            if wait:
                self.wait_ready(timeout)
            return pid
        java = java_binary()
        cp = kafka_classpath(settings)
        self.directory.mkdir(parents=True, exist_ok=True)
        props = self.directory / "server.properties"
        props.write_text(self._properties())
        log4j = self.directory / "log4j2.properties"
        log4j.write_text(LOG4J2.format(log=self.logfile))
        # The formatting tool lives a second or two: C1 alone compiles what it runs for less CPU than tiering up.
        base = [java, *C1_ONLY, f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
        if not (self.directory / "data" / "meta.properties").exists():
            fmt = subprocess.run(  # noqa: S603
                [*base, "kafka.tools.StorageTool", "format", "-t", self.cluster_id or str(uuid.uuid4()), "-c", str(props)],
                capture_output=True, text=True, check=False,
            )
            if fmt.returncode != 0:
                raise SetupError(f"formatting Kafka storage failed: {fmt.stdout}{fmt.stderr}")
        with open(self.directory / "stdout.log", "ab") as out:
            proc = subprocess.Popen(  # noqa: S603
                [java, f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC", *(C1_ONLY if self.jit == "c1" else ()),
                 "-Djava.awt.headless=true",
                 f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, "kafka.Kafka", str(props)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pidfile.write_text(str(proc.pid))
        if not wait:
            return proc.pid
        try:
            self.wait_ready(timeout, proc)
        except Exception:
            self.stop()
            raise
        return proc.pid

    def wait_ready(self, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Block until the broker answers a metadata request."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.connection.setup.timeout.ms": 1000, "log_level": 0})
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise SetupError(f"Kafka broker exited with {proc.returncode}; see {self.directory / 'stdout.log'}")
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception as e:  # noqa: BLE001 - retried until the deadline, then reported
                last = str(e)
            time.sleep(0.3)
        raise SetupError(f"Kafka broker at {self.bootstrap} did not answer within {timeout:.0f}s ({last})")

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker by the PID in its pidfile: SIGTERM, then SIGKILL after ``timeout``."""
        pid = self.running_pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not alive(pid):
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        return True

