"""Events/s applied by the DB projection, per read-model backend, beside the raw consume rate of the same records,
in the same run.

Run: ``.venv/bin/python -m bench.projections.db_throughput`` (``--backend rocksdb,postgresql``, ``--commands N``,
``--objects N``; uses ``ARBITER_KAFKA_BOOTSTRAP`` if set, else starts a throwaway broker on free ports; for
postgresql uses ``ARBITER_POSTGRES_DSN`` if set, else starts a throwaway server; both are stopped by their PIDs).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pydantic import SecretStr

from app.local.kafka_broker import LocalBroker, free_port
from app.local.postgres_server import LocalPostgres
from app.read_models import open_writer
from app.settings import Settings
from app.topics import ensure_topics
from bench.projections.workload import decisions, encoded, produce
from projections.db import DbProjection
from projections.runner import Runner, RunnerConfig


def raw_consume(bootstrap: str, topic: str, partitions: int, expected: int, batch: int) -> float:
    """Return seconds to consume ``expected`` records with no decoding or processing."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    n, start = 0, time.perf_counter()
    while n < expected:
        n += sum(1 for m in c.consume(batch, 1.0) if m.error() is None)
    took = time.perf_counter() - start
    c.close()
    return took


def projection_run(s: Settings, *, batch: int) -> tuple[float, int]:
    """Return (seconds, applied) for the DB projection to catch up from offset 0 into an empty read model."""
    proj = DbProjection(open_writer(s))
    cfg = RunnerConfig(s.kafka_bootstrap, (s.topic_events,), f"db-{uuid.uuid4().hex}", batch_size=batch,
                       stop_when_caught_up=True, lag_interval_s=600)
    start = time.perf_counter()
    Runner(cfg, proj).run()
    return time.perf_counter() - start, proj.counts.applied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--commands", type=int, default=150_000)
    ap.add_argument("--objects", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--backend", default="rocksdb,postgresql", help="comma-separated read-model backends")
    args = ap.parse_args()
    backends = args.backend.split(",")
    logging.basicConfig(level=logging.WARNING)

    broker = postgres = None
    bootstrap = os.environ.get("ARBITER_KAFKA_BOOTSTRAP")
    dsn = os.environ.get("ARBITER_POSTGRES_DSN")
    work = Path(tempfile.mkdtemp(prefix="bench-projections-"))
    work.chmod(0o755)  # the throwaway PostgreSQL server runs as the postgres user under root
    if not bootstrap:
        broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
        broker.start(Settings())
        bootstrap = broker.bootstrap
    try:
        if "postgresql" in backends and not dsn:
            postgres = LocalPostgres(work / "postgres", port=free_port())
            postgres.start()
        tag = uuid.uuid4().hex[:8]
        s = Settings(kafka_bootstrap=bootstrap, partitions=args.partitions, topic_commands=f"bench-c-{tag}",
                     topic_events=f"bench-e-{tag}", topic_rejections=f"bench-r-{tag}")
        ensure_topics(s)
        records = [r for r in encoded(decisions(args.objects, args.commands, seed=1), s.partitions) if r[0]]
        size = sum(len(r[3]) for r in records) / len(records)
        produce(bootstrap, s.topic_events, s.topic_rejections, records)
        n = len(records)
        print(f"{n} events ({size:.0f} B avg) over {args.objects} objects, {args.partitions} partitions, "
              f"batch {args.batch}; {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs")
        raw = raw_consume(bootstrap, s.topic_events, s.partitions, n, args.batch)
        print(f"raw consume (no decode)                         : {n / raw:>9,.0f} records/s  ({raw:.2f}s)")
        for backend in backends:
            for sync in (True, False):
                rs = s.model_copy(update={"read_model": backend, "projection_sync_writes": sync,
                                          "read_model_dir": work / f"rm-{sync}"})
                if backend == "postgresql":
                    name = f"bench_{uuid.uuid4().hex[:8]}"
                    rs.postgres_dsn = SecretStr(postgres.create_database(name) if postgres else dsn or "")
                    rs.postgres_schema = name  # a fresh schema when the DSN names a shared database
                took, applied = projection_run(rs, batch=args.batch)
                assert applied == n, (applied, n)
                label = f"{backend:<10} DB projection, {'durable per batch' if sync else 'no sync/fsync    '}"
                print(f"{label}: {n / took:>9,.0f} events/s   ({took:.2f}s)  ratio to raw {raw / took:.0%}")
        raw2 = raw_consume(bootstrap, s.topic_events, s.partitions, n, args.batch)
        print(f"raw consume again (drift check)                 : {n / raw2:>9,.0f} records/s  ({raw2:.2f}s)")
    finally:
        if postgres is not None:
            postgres.stop()
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
