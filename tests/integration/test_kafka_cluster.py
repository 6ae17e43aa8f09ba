"""``arbiter kafka start --brokers 3``'s cluster, for real: three KRaft nodes from Maven Central jars on 127.0.0.1.

The topic tool refuses thin replication there, creates Arbiter's topics with 3 replicas and min.insync.replicas 2
when asked, and an acks=all idempotent producer's every acknowledged record survives a broker killed with -9.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import TopicMetadata

from app.errors import SetupError
from app.local.kafka_broker import free_port
from app.local.kafka_cluster import LocalCluster
from app.settings import Settings
from app.topics import admin, describe_configs, ensure_topics
from app.validator.topic_io import read_all

pytestmark = pytest.mark.integration


def _created(bootstrap: str, topic: str) -> TopicMetadata:
    """The topic's metadata once the node asked knows it: a node other than the one that created it may learn of it
    a moment later (a KeyError under load, the topic being created)."""
    deadline = time.monotonic() + 30
    while (meta := admin(bootstrap).list_topics(timeout=10).topics.get(topic)) is None:
        assert time.monotonic() < deadline, f"{topic} created but not listed in 30 s"
        time.sleep(0.2)
    return meta


def test_three_brokers_replicate_arbiters_topics_and_lose_nothing_acknowledged_with_one_killed(tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path / "var", kafka_heap="384m", kafka_jit="c1", partitions=3)
    cluster = LocalCluster.from_settings(settings, 3, [(free_port(), free_port()) for _ in range(3)])
    try:
        cluster.start(settings)
        on = settings.model_copy(update={"kafka_bootstrap": cluster.bootstrap})
        with pytest.raises(SetupError, match="at least min.insync.replicas \\+ 1"):
            ensure_topics(on)  # the defaults, 1 and 1: refused on three brokers, nothing created
        assert settings.topic_commands not in admin(cluster.bootstrap).list_topics(timeout=10).topics
        prod = on.model_copy(update={"replication_factor": 3, "min_insync_replicas": 2})
        assert settings.topic_commands in ensure_topics(prod)
        meta = _created(cluster.bootstrap, settings.topic_commands)
        assert {len(p.replicas) for p in meta.partitions.values()} == {3}
        isr = describe_configs(admin(cluster.bootstrap), [settings.topic_commands])[settings.topic_commands]
        assert isr["min.insync.replicas"].value == "2"

        acked: list[bytes] = []
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "log_level": 0})

        def send(n: int, start: int) -> None:
            for i in range(start, start + n):
                producer.produce(settings.topic_commands, key=f"o{i % 7}".encode(), value=f"v{i}".encode(),
                                 on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
            assert producer.flush(60) == 0

        send(200, 0)
        victim = cluster.nodes[1]
        pid = victim.running_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # a machine lost: no clean shutdown
        send(200, 200)  # two in-sync replicas are left: acks=all still answers
        assert len(acked) == 400
        got = [r.value for r in read_all(prod, settings.topic_commands, timeout=60)]
        assert sorted(got) == sorted(acked)
    finally:
        cluster.stop()
        assert cluster.running() == [None, None, None], "a broker of the test cluster outlived it"
