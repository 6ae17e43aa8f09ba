"""Benchmark of ``arbiter verify replay``: re-decisions per second over a synthetic archive.

Run: ``.venv/bin/python -m bench.verify_replay --commands 1000000 --master 'local[1]'``. It writes a synthetic
archive (objects of one create and ``--updates`` updates, their outputs computed by the same fold, so it verifies
clean) as hive-partitioned Parquet under a temporary directory, then times

- **fold only**: ``app.verify.refold`` + ``compare`` in this process, one core, no Spark (the work of each task);
- **Spark job**: ``app.verify.replay.replay`` on ``--master`` (read Parquet, shuffle by key, sort, ``mapInArrow``),
  wall-clock rate and CPU seconds per 1M commands of this process's tree (JVM, Python workers, driver), as
  ``bench.archive`` reports the validator's.

The validator's own rate per core to compare with is in docs/benchmarks.md (the archive section's table, the same
machine); run both in one sitting for a fair ratio. Unsigned commands (``allow_unsigned_commands``): no HMAC per record.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from app.settings import Settings
from app.validator.murmur2 import partition_for
from app.verify.refold import Row, compare, refold
from app.verify.timeline import RulesTimeline
from commands import CreateObject, UpdateObject
from schemas import codec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def synthetic(settings: Settings, commands: int, updates: int) -> dict[str, list[Row]]:
    """Return the commands and the outputs the fold decides for them, per topic (offsets per partition)."""
    per_object = updates + 1
    offsets: dict[tuple[str, int], int] = {}
    rows: dict[str, list[Row]] = {}

    def put(topic: str, part: int, key: bytes | None, value: bytes | None, headers: tuple, ts: int) -> None:  # noqa: ANN001
        off = offsets.get((topic, part), 0)
        offsets[(topic, part)] = off + 1
        rows.setdefault(topic, []).append(Row(topic, part, off, ts, key, value, headers))

    timeline = RulesTimeline()
    for i in range(commands // per_object):
        oid = f"obj-{i}"
        key = oid.encode()
        part = partition_for(key, settings.partitions)
        cmds = [CreateObject(f"c{i}", oid, "alice", T0 + timedelta(milliseconds=i), document='{"n": 0}')]
        cmds += [UpdateObject(f"u{i}-{j}", oid, "alice", T0 + timedelta(milliseconds=i + j), patch=f'{{"n": {j}}}')
                 for j in range(updates)]
        mine = []
        for j, c in enumerate(cmds):
            put(settings.topic_commands, part, key, codec.encode_command(c), (), i + j)
            mine.append(rows[settings.topic_commands][-1])
        for (topic, k, v, p, h), (_, _, ts) in refold(mine, timeline, settings).outputs:
            put(topic, p, k, v, h, ts)
    return rows


def write_archive(root: Path, rows: dict[str, list[Row]]) -> None:
    """Write ``rows`` as the archive's ``stream/topic=<t>/date=<d>/`` Parquet (without the sink's log)."""
    for topic, rs in rows.items():
        d = root / "stream" / f"topic={topic}" / "date=2026-01-01"
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({
            "partition": pa.array([r.partition for r in rs], pa.int32()),
            "offset": pa.array([r.offset for r in rs], pa.int64()),
            "timestamp_ms": pa.array([r.timestamp_ms for r in rs], pa.int64()),
            "key": pa.array([r.key for r in rs], pa.binary()),
            "value": pa.array([r.value for r in rs], pa.binary()),
            "headers": pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in rs], _HEADERS)}),
            d / "part-0.parquet")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=100_000)
    ap.add_argument("--updates", type=int, default=3, help="updates per object after its create")
    ap.add_argument("--master", default="local[1]")
    ap.add_argument("--no-spark", action="store_true", help="measure the fold only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="arbiter-verify-bench-") as tmp:
        settings = Settings(var_dir=Path(tmp) / "var", archive_uri=str(Path(tmp) / "archive"),
                            allow_unsigned_commands=True, spark_master=args.master)
        rows = synthetic(settings, args.commands, args.updates)
        commands = rows[settings.topic_commands]
        by_key: dict[bytes | None, list[Row]] = {}
        for r in commands:
            by_key.setdefault(r.key, []).append(r)
        outputs: dict[bytes | None, list[Row]] = {}
        for topic, rs in rows.items():
            if topic != settings.topic_commands:
                for r in rs:
                    outputs.setdefault(r.key, []).append(r)
        cpu = time.process_time()
        wall = time.perf_counter()
        bad = sum(len(compare(refold(rs, RulesTimeline(), settings), outputs.get(k, ()))) for k, rs in by_key.items())
        result = {"commands": len(commands), "fold_only_per_s": round(len(commands) / (time.perf_counter() - wall)),
                  "fold_only_cpu_per_s": round(len(commands) / (time.process_time() - cpu)), "fold_divergences": bad}
        if not args.no_spark:
            from app.spark_session import spark_session
            from app.verify.replay import replay

            write_archive(Path(tmp) / "archive", rows)
            from bench.peer.cpu import by_component, delta

            spark = spark_session(settings, app_name="arbiter-verify-bench")
            try:
                before, wall = by_component(), time.perf_counter()
                report = replay(spark, settings)
                seconds, cpu = time.perf_counter() - wall, delta(before, by_component())
                result |= {"master": args.master, "spark_per_s": round(report.commands / seconds),
                           "spark_divergences": report.divergences, "spark_commands": report.commands,
                           # the JVM, its Python workers and this driver: what bench.archive's line counts for a query
                           "spark_cpu_s_per_1m": round(sum(cpu.values()) / report.commands * 1e6, 1),
                           "spark_cpu_by_component": {k: round(v, 1) for k, v in cpu.items() if v}}
            finally:
                spark.stop()
        print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
