"""``arbiter run``: the whole pipeline on embedded defaults, for a newcomer's first look."""

from __future__ import annotations

import argparse

from app.kafka_broker import LocalBroker
from app.settings import get_settings
from app.topics import describe, ensure_topics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="start the local pipeline and show it working")
    p.set_defaults(handler=_run)


def _run(_: argparse.Namespace) -> int:
    s = get_settings()
    broker = LocalBroker.from_settings(s)
    print(f"[1/2] starting Kafka broker on {broker.bootstrap} ...", flush=True)
    pid = broker.start(s)
    print(f"      running, pid {pid}")
    print("[2/2] creating topics ...", flush=True)
    ensure_topics(s)
    for t in describe(s):
        print(f"      {t.name:<12} partitions={t.partitions:<3} messages={t.messages}")
    print("broker left running; stop it with: .venv/bin/arbiter kafka stop")
    return 0
