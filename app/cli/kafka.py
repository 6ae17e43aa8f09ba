"""``arbiter kafka start|stop|status|topics|fetch``: the local KRaft broker and Arbiter's topics."""

from __future__ import annotations

import argparse

from app.local.jars import fetch
from app.local.kafka_broker import LocalBroker
from app.settings import get_settings
from app.topics import describe, ensure_topics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("kafka", help="run the local single-node Kafka broker")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("fetch", help="download broker and Spark connector jars from Maven Central (once)").set_defaults(
        handler=_fetch)
    actions.add_parser("start", help="start the broker on 127.0.0.1 and create the topics").set_defaults(
        handler=_start)
    actions.add_parser("stop", help="stop the broker by its PID").set_defaults(handler=_stop)
    actions.add_parser("status", help="broker PID and topic message counts").set_defaults(handler=_status)
    actions.add_parser("topics", help="create missing topics and describe them").set_defaults(handler=_topics)


def _fetch(_: argparse.Namespace) -> int:
    s = get_settings()
    for bundle in ("kafka", "spark"):
        print(f"{bundle}: {fetch(s, bundle)}")
    return 0


def _start(_: argparse.Namespace) -> int:
    s = get_settings()
    broker = LocalBroker.from_settings(s)
    pid = broker.start(s)
    created = ensure_topics(s)
    print(f"kafka broker running at {broker.bootstrap} (pid {pid}, data {broker.directory})")
    if created:
        print(f"created topics: {', '.join(created)}")
    return 0


def _stop(_: argparse.Namespace) -> int:
    broker = LocalBroker.from_settings(get_settings())
    print("kafka broker stopped" if broker.stop() else "kafka broker was not running")
    return 0


def _status(_: argparse.Namespace) -> int:
    s = get_settings()
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
