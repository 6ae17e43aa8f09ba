"""The archive, a rebuild from it after retention deleted the events' early segments, and the parking lot.

One test, one validator and one archive run on the session's broker and Spark: each step reuses the last one's
topics (the suite's time budget).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from app.archive import compact as compaction
from app.archive.erase import COMPACT_LOCK, LOCK, ArchiveBusy, erase_archive
from app.archive.erase import lock as archive_lock
from app.archive.query import locations
from app.archive.query import start as start_archive
from app.parked import lot
from app.read_models import open_reader, rebuild_target
from app.settings import Settings
from app.topics import admin
from app.validator.job import drain
from app.validator.murmur2 import partition_for
from app.validator.topic_io import produce, read_all
from commands import CreateObject, DeleteObject, Event, GrantReader, ReasonCode, UpdateObject
from commands.ids import redrive_command_id
from projections import archived
from projections.audit import AuditProjection, verify
from projections.rebuild import rebuild_read_model
from projections.runner import Runner, RunnerConfig
from schemas import codec, parked
from tests.conftest import read_model_on
from tests.docs_snippets import snippet
from tests.integration.validator_oracle import send_commands

pytestmark = pytest.mark.integration


def _at(i: int) -> datetime:
    return datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=i)


def _commands(prefix: str, objects: int, start: int = 0) -> list[CreateObject | UpdateObject]:
    out: list[CreateObject | UpdateObject] = []
    for i in range(objects):
        out.append(CreateObject(f"{prefix}-c{i}", f"obj-{i}", "alice", _at(start + i), document='{"n": 0}'))
        out.append(UpdateObject(f"{prefix}-u{i}", f"obj-{i}", "alice", _at(start + i + 1), patch=f'{{"{prefix}": {i}}}'))
    return out


def _watermarks(s: Settings, topic: str) -> dict[int, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "arbiter-test-wm", "log_level": 0})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                for p in range(s.partitions)}
    finally:
        c.close()


def _alter(s: Settings, topic: str, **config: str) -> None:
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
    client = admin(s.kafka_bootstrap)  # held until the futures resolve: a collected client cancels them
    for fut in client.incremental_alter_configs([change]).values():
        fut.result(timeout=30)


def _archive(spark, s: Settings) -> None:  # noqa: ANN001
    start_archive(spark, s, available_now=True).awaitTermination(240)


def _duckdb_snippet(root: Path) -> dict[str, int]:
    """Run the docs' DuckDB query as printed, on the archive at ``root``; return its counts per topic."""
    done = subprocess.run([sys.executable, "-c", snippet("archive_duckdb.py")], capture_output=True, text=True,
                          env={**os.environ, "ARBITER_ARCHIVE_URI": str(root)}, timeout=120, check=True)
    return dict(ast.literal_eval(done.stdout.strip()))


def _spark_snippet(s: Settings, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the docs' Spark SQL queries as printed, in this process (its session is the one they get); return what
    they printed."""
    monkeypatch.setenv("ARBITER_ARCHIVE_URI", s.archive_uri)
    monkeypatch.setenv("ARBITER_TOPIC_EVENTS", s.topic_events)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet("archive_spark.py"), "archive_spark.py", "exec"), {})  # noqa: S102 - the docs' code
    monkeypatch.delenv("ARBITER_ARCHIVE_URI")
    monkeypatch.delenv("ARBITER_TOPIC_EVENTS")
    return out.getvalue()


def _versions(s: Settings) -> dict[str, int]:
    reader = open_reader(s)
    try:
        return {oid: view.version for oid, view in reader.views()}
    finally:
        reader.close()


def test_archive_rebuild_after_retention_and_parking(spark, settings: Settings, tmp_path: Path,  # noqa: ANN001
                                                      request: pytest.FixtureRequest,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings.model_copy(update={"archive_uri": str(tmp_path / "archive")})
    root = archived.local_root(s.archive_location)
    first = _commands("a", 12)
    send_commands(s, first)
    # Poison: bytes that are no command, on the partition of obj-0, signed as Arbiter's producers sign.
    key = b"obj-0"
    part = partition_for(key, s.partitions)
    big = b"\xff" + bytes(range(256)) * 400  # over the rejection's kept bytes: only the parked copy has it all
    poison = produce(s, [(key, b"\xff garbage"), (key, big)], partition=part)
    drain(spark, s, timeout=180)
    _archive(spark, s)

    # --- the parking lot: full bytes parked, the rejection points there ----------------------------------------
    rejections = [codec.decode_rejection(r.value) for r in read_all(s, s.topic_rejections)]
    malformed = {(r.original.partition, r.original.offset): r for r in rejections if r.original is not None}
    assert set(malformed) == set(poison)
    assert all(r.reason == ReasonCode.MALFORMED and r.message.endswith(f"parked in {s.parked_topic}[{part}]]")
               for r in malformed.values())
    assert len(malformed[poison[1]].original.value) < len(big)  # the rejection's copy is bounded
    copies = [parked.decode(r.value) for r in read_all(s, s.parked_topic)]
    assert [(p.partition, p.offset, p.key, p.value) for p in copies] == [
        (part, poison[0][1], key, b"\xff garbage"), (part, poison[1][1], key, big)]
    assert all(p.signature for p in copies) and [p.rejection_id for p in copies] == [
        malformed[x].rejection_id for x in poison]

    # --- the archive: Spark SQL and DuckDB see every record once, decoded where it decodes ----------------------
    spark.read.parquet(locations(s)[0]).createOrReplaceTempView("archive")
    counts = {r["topic"]: r["n"] for r in spark.sql(
        "SELECT topic, count(*) AS n FROM archive GROUP BY topic").collect()}
    expected = {t: sum(hi - lo for lo, hi in _watermarks(s, t).values())
                for t in (s.topic_commands, s.topic_events, s.topic_rejections, s.parked_topic)}
    assert counts == expected
    bad = spark.sql(f"SELECT object_id, type, decode_error, value FROM archive WHERE topic = '{s.topic_commands}' "
                    "AND decode_error IS NOT NULL ORDER BY offset").collect()
    assert [(r["object_id"], r["type"], bytes(r["value"])) for r in bad] == [(None, None, b"\xff garbage"),
                                                                              (None, None, big)]
    updated = spark.sql(f"SELECT object_id, version, principal FROM archive WHERE topic = '{s.topic_events}' "
                        "AND type = 'UPDATED' ORDER BY object_id").collect()
    assert [(r["object_id"], r["version"], r["principal"]) for r in updated] == sorted(
        (f"obj-{i}", 2, "alice") for i in range(12))
    con = duckdb.connect()
    files = [str(f) for f in archived.files(root)]
    duck = dict(con.execute("SELECT topic, count(*) FROM read_parquet($files, hive_partitioning = true) "
                            "GROUP BY topic", {"files": files}).fetchall())
    assert duck == expected
    # the docs' own queries, as printed (docs/operations/archive.md): DuckDB through the committed file list, and
    # Spark SQL on the stream, whose tables show the same counts, the updates and the undecodable records
    assert _duckdb_snippet(root) == expected
    shown = _spark_snippet(s, monkeypatch)
    assert all(re.search(rf"\|\s*{re.escape(t)}\s*\|\s*{n}\s*\|", shown) for t, n in expected.items()), shown
    assert all(re.search(rf"\|\s*obj-{i}\s*\|\s*2\s*\|\s*alice\s*\|", shown) for i in range(12)), shown
    assert {(int(p), int(o)) for p, o in re.findall(rf"\|{re.escape(s.topic_commands)}\s*\|(\d+)\s*\|(\d+)\s*\|",
                                                    shown)} == set(poison), shown

    # --- retention deletes every early segment of the events topic ----------------------------------------------
    first_events = expected[s.topic_events]
    _alter(s, s.topic_events, retention_ms="100", segment_ms="100")
    deadline = time.monotonic() + 90
    while any(lo < hi for lo, hi in _watermarks(s, s.topic_events).values() if hi):
        assert time.monotonic() < deadline, f"retention did not delete the segments: {_watermarks(s, s.topic_events)}"
        time.sleep(0.5)
    _alter(s, s.topic_events, retention_ms=str(s.retention_ms))
    assert all(lo == hi for lo, hi in _watermarks(s, s.topic_events).values())

    # --- redrive a parked record after a fix, twice; discard the other -------------------------------------------
    fix = tmp_path / "fixed.avro"
    fix.write_bytes(codec.encode_command(UpdateObject("operator-typed", "obj-0", "alice", _at(99), patch='{"fixed": 1}')))
    origin = f"{s.topic_commands}[{part}]@{poison[1][1]}"
    record = lot.redrive(s, origin, fix.read_bytes(), operator="ops-test")
    with pytest.raises(lot.ParkedNotRedrivable):
        lot.redrive(s, origin)  # already redriven: refused without --again
    lot.redrive(s, origin, fix.read_bytes(), operator="ops-test", again=True)
    lot.discard(s, f"{s.topic_commands}[{part}]@{poison[0][1]}", operator="ops-test", note="garbage")
    assert {e.record.offset: e.status for e in lot.entries(s)} == {poison[0][1]: "discarded",
                                                                    poison[1][1]: "redriven"}

    second = _commands("b", 12, start=50)[1::2]  # updates only: they need the archived history to apply
    # an object to erase at the end: its documents are in commands, stream and compacted events
    # no 4-byte run twice in them: Parquet's snappy would store a repeat as a back-reference, hiding it from a grep
    secrets = (b"QWERTYUIOPASDFGHJKLZXCVBNM", b"MNBVCXZLKJHGFDSAPOIUYTREWQ")
    second += [CreateObject("x-c", "obj-x", "alice", _at(70), document=f'{{"s": "{secrets[0].decode()}"}}'),
               UpdateObject("x-u", "obj-x", "alice", _at(71), patch=f'{{"s": "{secrets[1].decode()}"}}'),
               GrantReader("x-g", "obj-x", "alice", _at(72), reader="bob"),
               DeleteObject("x-d", "obj-x", "alice", _at(73))]
    send_commands(s, second)
    drain(spark, s, timeout=180)
    outcomes = [codec.decode_outcome(r.value) for t in (s.topic_events, s.topic_rejections) for r in read_all(s, t)]
    redriven = [o for o in outcomes if o.command_id == record["command_id"]]
    assert record["command_id"] == redrive_command_id(s.topic_commands, part, poison[1][1])
    assert Counter(type(o).__name__ if isinstance(o, Event) else o.reason.value for o in redriven) == {
        "Event": 1, "DUPLICATE": 1}  # the second redrive changed nothing
    total_events = sum(hi for _, hi in _watermarks(s, s.topic_events).values())
    want = {f"obj-{i}": 3 for i in range(12)} | {"obj-0": 4, "obj-x": 4}

    # --- rebuild from the archive, both read models: archive up to its end, then Kafka from the next offset --------
    for kind in ("rocksdb", "postgresql"):
        with read_model_on(kind, s, request) as rs:
            cfg = RunnerConfig(bootstrap=rs.kafka_bootstrap, topics=(rs.topic_events,), group_id=f"t-{kind}")
            res = rebuild_read_model(cfg, rebuild_target(rs), root)
            assert (res.archived, res.stats.records) == (first_events, total_events - first_events), kind
            assert (res.counts.applied, res.counts.gaps, res.counts.stale) == (total_events, 0, 0), kind
            assert _versions(rs) == want, kind
    with pytest.raises(archived.ArchiveGap, match="Kafka starts at"):
        rebuild_read_model(RunnerConfig(bootstrap=s.kafka_bootstrap, topics=(s.topic_events,), group_id="t-gap"),
                           rebuild_target(s), tmp_path / "empty-archive")

    # --- the archive goes on exactly once; compaction rewrites a date without reading anything twice ------------
    _archive(spark, s)
    today = datetime.now(UTC).date().isoformat()
    before = archived.topic_files(root, s.topic_events)
    assert len(before) >= 2
    assert compaction.compact(spark, root, s.topic_events, today) == len(before)
    assert len(archived.topic_files(root, s.topic_events)) == 1
    parts, offsets, *_ = archived.read_topic(root, s.topic_events)
    assert archived.ends(parts, offsets, s.topic_events) == {p: hi for p, (_, hi) in
                                                             _watermarks(s, s.topic_events).items() if hi}
    assert _duckdb_snippet(root) == {t: sum(hi - lo for lo, hi in _watermarks(s, t).values()) +  # after compaction
                                     (first_events if t == s.topic_events else 0) for t in expected}
    files = [str(f) for f in archived.files(root)]
    assert con.execute("SELECT count(*), count(DISTINCT (topic, partition, \"offset\")) FROM read_parquet($files, "
                       "hive_partitioning = true)", {"files": files}).fetchone() == (
        sum(hi - lo for t in expected for lo, hi in _watermarks(s, t).values()) + first_events,) * 2

    # --- every redrive and discard is in the audit chain, which verifies -------------------------------------------
    audit = AuditProjection(tmp_path / "audit", sync=False)
    Runner(RunnerConfig(bootstrap=s.kafka_bootstrap, topics=(s.topic_rejections, s.parked_log_topic),
                        group_id="t-audit", stop_when_caught_up=True), audit).run()
    report = verify(tmp_path / "audit")
    assert report.ok, report.problems
    assert sum(n for (t, _), n in report.entries.items() if t == s.parked_log_topic) == 3

    # --- erasure: obj-x's documents leave every archive file; Spark and DuckDB read the same rows; a rebuild --------
    def holding() -> list[str]:
        return sorted(str(f.relative_to(root)) for f in root.rglob("*.parquet")
                      if any(x in f.read_bytes() for x in secrets))

    assert len(holding()) >= 3  # the grep sees them: commands, stream events, compacted events
    stream_rows = spark.read.parquet(locations(s)[0]).count()
    duck_rows = con.execute("SELECT count(*) FROM read_parquet($files, hive_partitioning = true)",
                            {"files": files}).fetchone()
    for name in (LOCK, COMPACT_LOCK):  # a running query or compaction refuses the erasure
        held = archive_lock(root, "testing", name)
        with pytest.raises(ArchiveBusy):
            erase_archive(root, "obj-x")
        held.release()
    done = erase_archive(root, "obj-x")
    assert holding() == []
    assert done.rows >= 7 and done.log_entries >= 2  # 4 commands, 3 events (the DELETED keeps its value); log sizes
    logged = [json.loads(line) for f in (root / "stream" / "_spark_metadata").iterdir() if f.name[0].isdigit()
              for line in f.read_text().splitlines()[1:]]
    assert all(e["size"] == archived.local_path(e["path"]).stat().st_size for e in logged)  # the sink's log agrees
    assert erase_archive(root, "obj-x").rows == 0  # idempotent
    spark.read.parquet(locations(s)[0]).createOrReplaceTempView("erased")
    assert spark.sql("SELECT count(*) AS n FROM erased").collect()[0]["n"] == stream_rows
    rows = spark.sql("SELECT topic, type, version, value IS NULL AS gone FROM erased WHERE object_id = 'obj-x'").collect()
    assert {(r["topic"], r["type"], r["gone"]) for r in rows} == {
        (s.topic_commands, c, True) for c in ("CreateObject", "UpdateObject", "GrantReader", "DeleteObject")} | {
        (s.topic_events, t, True) for t in ("CREATED", "UPDATED", "READER_GRANTED")} | {(s.topic_events, "DELETED", False)}
    assert con.execute("SELECT count(*) FROM read_parquet($files, hive_partitioning = true)",
                       {"files": [str(f) for f in archived.files(root)]}).fetchone() == duck_rows
    with read_model_on("rocksdb", s, request) as rs:
        res = rebuild_read_model(RunnerConfig(bootstrap=rs.kafka_bootstrap, topics=(rs.topic_events,), group_id="t-x"),
                                 rebuild_target(rs), root)
        assert res.counts.gaps == 1  # the DELETED lands on no view: its CREATED, UPDATED and grant were erased
        reader = open_reader(rs)
        try:
            tomb = reader.get("obj-x")
        finally:
            reader.close()
        assert tomb is not None and (tomb.deleted, tomb.version, tomb.document, tomb.owner) == (True, 4, {}, "alice")
        assert _versions(rs) == want
