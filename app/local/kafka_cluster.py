"""A local KRaft cluster of N brokers on 127.0.0.1 (``arbiter kafka start --brokers N``): production's shape on one host.

Each node is a combined broker and controller (``process.roles=broker,controller``), as Kafka's own quickstart runs
a cluster on one machine: three JVMs instead of six, and a quorum of three controllers that survives the loss of
any one node, which is what losing a machine means here. A production cluster on several hosts would usually
separate the controllers (KIP-833); nothing in Arbiter depends on which.

Node ``i`` (1..N) listens on ``kafka_port + 2(i-1)`` (clients) and ``kafka_controller_port + 2(i-1)`` (controllers),
keeps its data under ``<var_dir>/kafka/cluster/node-<i>`` and its PID there; every node is formatted with the one
cluster id kept in ``<var_dir>/kafka/cluster/cluster.id``. Kafka's own topics get ``min(3, N)`` replicas.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from app.errors import SetupError
from app.local.kafka_broker import LocalBroker
from app.settings import Settings

#: The most nodes a local cluster may have (each is a JVM of ``kafka_heap``).
MAX_LOCAL_BROKERS = 5


@dataclass
class LocalCluster:
    """N ``LocalBroker`` nodes forming one KRaft quorum."""

    nodes: list[LocalBroker]

    @classmethod
    def from_settings(cls, settings: Settings, brokers: int,
                      ports: list[tuple[int, int]] | None = None) -> LocalCluster:
        """The cluster of ``brokers`` nodes ``settings`` name (``ports``: each node's client and controller port
        instead of the ones counted from ``kafka_port`` and ``kafka_controller_port``)."""
        if not 1 <= brokers <= MAX_LOCAL_BROKERS:
            raise SetupError(f"a local cluster has 1 to {MAX_LOCAL_BROKERS} brokers, not {brokers}")
        top = cls.directory_of(settings)
        top.mkdir(parents=True, exist_ok=True)
        id_file = top / "cluster.id"
        if not id_file.exists():
            id_file.write_text(str(uuid.uuid4()))
        cluster_id = id_file.read_text().strip()
        ports = ports or [(settings.kafka_port + 2 * i, settings.kafka_controller_port + 2 * i) for i in range(brokers)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        return cls([LocalBroker(top / f"node-{i + 1}", p, c, settings.kafka_heap, node_id=i + 1, voters=voters,
                                cluster_id=cluster_id, internal_replicas=min(3, brokers), jit=settings.kafka_jit)
                    for i, (p, c) in enumerate(ports)])

    @staticmethod
    def directory_of(settings: Settings) -> Path:
        return settings.kafka_dir / "cluster"

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def start(self, settings: Settings, timeout: float = 120.0) -> list[int]:
        """Start every node that is not running, then wait until the cluster's metadata lists all of them."""
        # Side by side: each node's first start runs Kafka's formatting tool (a JVM of its own) before the broker.
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            pids = list(pool.map(lambda n: n.start(settings, timeout, wait=False), self.nodes))
        self.wait_ready(timeout)
        return pids

    def wait_ready(self, timeout: float) -> None:
        """Block until every node's metadata names every node as a broker.

        Asked of each node: one node listing all three says nothing of another that has not caught up, and a client
        asking that one (``ensure_topics`` counts the brokers to refuse thin replication) would see fewer.
        """
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        want = {n.node_id for n in self.nodes}
        seen: set[int] = set()
        waiting = list(self.nodes)
        while time.monotonic() < deadline:
            node = waiting[0]
            client = AdminClient({"bootstrap.servers": node.bootstrap, "socket.connection.setup.timeout.ms": 1000,
                                  "log_level": 0})
            try:
                seen = set(client.list_topics(timeout=2).brokers)
                if seen >= want:
                    waiting.pop(0)
                    if not waiting:
                        return
                    continue
            except Exception:  # noqa: BLE001, S110 - retried until the deadline, then reported
                pass
            time.sleep(0.3)
        raise SetupError(f"the local cluster at {self.bootstrap} did not list its {len(self.nodes)} brokers within "
                         f"{timeout:.0f}s (node {waiting[0].node_id} listed {sorted(seen)}); see "
                         f"{waiting[0].directory / 'stdout.log'}")

    def running(self) -> list[int | None]:
        return [n.running_pid() for n in self.nodes]

    def stop(self) -> int:
        """Stop every running node by its PID, all at once; return how many were running.

        One by one, the last nodes wait for a quorum that has already gone: a broker's controlled shutdown needs the
        active controller, and once a majority of the controllers has stopped (or a node was lost before) the
        remaining node hangs until its stop timeout kills it (30 s per node, seen with one node killed -9).
        Stopped together, the controllers stay up until their own brokers' shutdowns are done.
        """
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            return sum(pool.map(LocalBroker.stop, self.nodes))
