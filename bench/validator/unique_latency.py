"""``python -m bench.validator.unique_latency``: what a unique value costs a create, on the running rocksdb validator.

One validator query (throwaway broker, ``--partitions``, the configured trigger) under a rules document with two
types: ``user`` (``email`` unique: its create claims an index entry through protocol records, issue 53) and ``note``
(the same shape, nothing unique). One command at a time, alternating untyped create, ``note`` create and ``user``
create, each measured from its produce acknowledgement to its outcome on the output topics (``latency.Probe``).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from app.rules.deploy import deploy
from app.settings import Settings
from app.spark_session import spark_session
from app.topics import ensure_topics
from app.validator.job import build_query
from bench.harness import throwaway_broker
from bench.validator.latency import Probe
from commands import CreateObject
from schemas import codec

RULES = json.dumps({"rules": 1, "types": {"user": {"tracked": {"email": "/email"}, "unique": ["email"]},
                                          "note": {"tracked": {"email": "/email"}}}})


def _create(kind: str, n: int) -> tuple[bytes, bytes]:
    oid = f"{kind}-{n}-{uuid.uuid4().hex[:8]}"
    cmd = CreateObject(f"c-{oid}", oid, "alice", datetime.now(UTC), document=json.dumps({"email": f"{oid}@x"}),
                       object_type=None if kind == "untyped" else kind)
    return oid.encode(), codec.encode_command(cmd)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.validator.unique_latency")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--trigger", default=Settings().trigger_interval)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="arbiter-bench-unique-"))
    kinds = ("untyped", "note", "user")
    with throwaway_broker(work) as broker:
        s = Settings(kafka_bootstrap=broker.bootstrap, var_dir=work / "var", partitions=args.partitions,
                     trigger_interval=args.trigger, state_backend="rocksdb")
        ensure_topics(s)
        deploy(s, RULES, principal="ops")
        spark = spark_session(s, app_name="arbiter-bench-unique")
        query = build_query(spark, s)
        probe = Probe(s, [s.topic_events, s.topic_rejections], "outcome")
        lat: dict[str, list[float]] = {k: [] for k in kinds}
        try:
            for n in range(args.warm + args.rounds):
                for kind in kinds:
                    (took,) = probe.burst([_create(kind, n)], timeout=300)
                    if n >= args.warm:
                        lat[kind].append(took)
                    time.sleep(0.2)
        finally:
            probe.close()
            query.stop()
            spark.stop()
    print(f"{args.rounds} creates of each kind, one at a time, {args.partitions} partitions, trigger {args.trigger}")
    for kind in kinds:
        v = sorted(lat[kind])
        print(f"{kind}: p50 {statistics.median(v) * 1000:.0f} ms, p90 {v[int(len(v) * 0.9)] * 1000:.0f} ms, "
              f"max {v[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
