"""``arbiter kafka start|stop|status|topics|fetch``: the local KRaft broker (or cluster) and Arbiter's topics."""

from __future__ import annotations

import argparse
import sys

from app.errors import SetupError
from app.local.jars import fetch
from app.local.kafka_broker import LocalBroker
from app.local.kafka_cluster import MAX_LOCAL_BROKERS, LocalCluster
from app.settings import get_settings
from app.topics import describe, ensure_topics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("kafka", help="run the local Kafka broker (or a local cluster: --brokers N)")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("fetch", help="download broker and Spark connector jars from Maven Central (once)").set_defaults(
        handler=_fetch)
    start = actions.add_parser("start", help="start the broker on 127.0.0.1 and create the topics")
    stop = actions.add_parser("stop", help="stop the broker by its PID")
    status = actions.add_parser("status", help="broker PID and topic message counts")
    for action, handler in ((start, _start), (stop, _stop), (status, _status)):
        action.add_argument("--brokers", type=int, default=1, help="1: the single embedded broker; 2 to "
                            f"{MAX_LOCAL_BROKERS}: a local KRaft cluster of that many combined brokers and controllers "
                            "(docs/cluster.md; default: %(default)s)")
        action.set_defaults(handler=handler)
    actions.add_parser("topics", help="create missing topics and describe them").set_defaults(handler=_topics)


def _fetch(_: argparse.Namespace) -> int:
    s = get_settings()
    for bundle in ("kafka", "spark"):
        print(f"{bundle}: {fetch(s, bundle)}")
    return 0


def _start(args: argparse.Namespace) -> int:
    s = get_settings()
    if args.brokers == 1:
        broker = LocalBroker.from_settings(s)
        pid = broker.start(s)
        created = ensure_topics(s)
        print(f"kafka broker running at {broker.bootstrap} (pid {pid}, data {broker.directory})")
    else:
        cluster = LocalCluster.from_settings(s, args.brokers)
        pids = cluster.start(s)
        print(f"kafka cluster of {args.brokers} brokers running at {cluster.bootstrap} (pids "
              f"{', '.join(map(str, pids))}, data {LocalCluster.directory_of(s)})")
        print(f"its clients: ARBITER_KAFKA_BOOTSTRAP={cluster.bootstrap} ARBITER_REPLICATION_FACTOR="
              f"{min(3, args.brokers)} ARBITER_MIN_INSYNC_REPLICAS={min(2, args.brokers - 1)}")
        try:
            created = ensure_topics(s.model_copy(update={"kafka_bootstrap": cluster.bootstrap}))
        except SetupError as e:
            print(f"arbiter: topics not created: {e}", file=sys.stderr)
            return 1
    if created:
        print(f"created topics: {', '.join(created)}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    s = get_settings()
    if args.brokers > 1:
        n = LocalCluster.from_settings(s, args.brokers).stop()
        print(f"stopped {n} kafka broker(s) of the local cluster")
        return 0
    broker = LocalBroker.from_settings(s)
    print("kafka broker stopped" if broker.stop() else "kafka broker was not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    s = get_settings()
    if args.brokers > 1:
        cluster = LocalCluster.from_settings(s, args.brokers)
        for node, pid in zip(cluster.nodes, cluster.running(), strict=True):
            print(f"broker {node.node_id} at {node.bootstrap}: {'pid ' + str(pid) if pid else 'not running'}")
    else:
        pid = LocalBroker.from_settings(s).running_pid()
        print(f"local broker: {'pid ' + str(pid) if pid else 'not running'} (bootstrap {s.kafka_bootstrap})")
    for t in describe(s):
        print(f"  {t.name:<12} partitions={t.partitions:<3} messages={t.messages}")
    return 0


def _topics(_: argparse.Namespace) -> int:
    s = get_settings()
    created = ensure_topics(s)
    for t in describe(s):
        print(f"{t.name:<12} partitions={t.partitions:<3} messages={t.messages}{'  (created)' if t.name in created else ''}")
    return 0
