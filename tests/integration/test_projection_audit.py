"""The audit projection against the real broker: every decision chained, tampering and deletion named, history shown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Rdict

from app.settings import Settings
from bench.projections.workload import decisions, encoded, partition_of, produce
from commands import Event
from projections.audit import AuditProjection, history, verify
from projections.audit.chain import entry_key, unpack_entry
from projections.audit.store import options
from projections.runner import Runner, RunnerConfig

pytestmark = pytest.mark.integration


def _run(settings: Settings, path: Path) -> tuple[AuditProjection, int, int]:
    cfg = RunnerConfig(bootstrap=settings.kafka_bootstrap, topics=(settings.topic_events, settings.topic_rejections),
                       group_id="t-audit", batch_size=300, stop_when_caught_up=True, lag_interval_s=60)
    proj = AuditProjection(path, sync=False)
    stats = Runner(cfg, proj).run()
    return proj, stats.records, stats.undecodable


def _edit(path: Path, key: bytes, value: bytes | None) -> None:
    db = Rdict(str(path), options())
    if value is None:
        del db[key]
    else:
        db[key] = value
    db.close()


def test_audit_chains_every_decision_and_verify_names_tampering(settings: Settings) -> None:
    outcomes = decisions(n_objects=40, n_commands=600, seed=3)
    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections, encoded(outcomes, settings.partitions))
    # Bytes that are not a decision at all: kept in the chain as data, counted, the stream goes on.
    junk_part = partition_of("obj-junk", settings.partitions)
    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections,
            [(False, junk_part, b"obj-junk", b"\x00\x00\x00\x00\x63garbage")])
    path = settings.var_dir / "audit"

    proj, records, undecodable = _run(settings, path)
    assert (records, undecodable, proj.appended) == (len(outcomes) + 1, 1, len(outcomes) + 1)
    again, records, _ = _run(settings, path)
    assert (records, again.appended) == (0, 0), "restart resumes after the chain heads: nothing appended twice"

    report = verify(path)
    assert report.ok, report.problems
    assert sum(report.entries.values()) == len(outcomes) + 1

    oid = max({o.object_id for o in outcomes}, key=lambda i: sum(o.object_id == i for o in outcomes))
    mine = [o for o in outcomes if o.object_id == oid]
    shown = history(path, oid)
    def label(o: object) -> tuple[str | None, str]:
        return (o.command_id, "ACCEPTED" if isinstance(o, Event) else "REJECTED")  # type: ignore[attr-defined]
    assert sorted((h.command_id, h.outcome) for h in shown) == sorted(label(o) for o in mine)
    times = [h.occurred_at for h in shown]
    assert times == sorted(times), "oldest command first (a retry sorts at its first attempt's issued_at)"
    assert [h.outcome for h in history(path, "obj-junk")] == ["UNDECODABLE"]

    env = {**os.environ, "ARBITER_VAR_DIR": str(settings.var_dir)}
    cli = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", "audit"]
    ok = subprocess.run([*cli, "verify"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0 and "audit trail intact" in ok.stdout, ok.stdout + ok.stderr
    shown_cli = subprocess.run([*cli, "show", oid], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert shown_cli.returncode == 0 and len(shown_cli.stdout.splitlines()) == len(mine), shown_cli.stdout

    # Flip one byte inside a record's value (the event's Avro body) in the middle of a chain.
    topic, part = settings.topic_events, partition_of(oid, settings.partitions)
    key = entry_key(topic, part, 5)
    db = Rdict(str(path), options())
    original = db[key]
    db.close()
    _, entry = unpack_entry(key, original)
    flipped = bytearray(original)
    flipped[-3] ^= 0x01
    _edit(path, key, bytes(flipped))
    report = verify(path)
    found = [(p.topic, p.partition, p.kind, p.seq, p.offset) for p in report.problems]
    assert found == [(topic, part, "tampered", 5, entry.offset)]
    bad = subprocess.run([*cli, "verify"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1 and f"BROKEN {topic}[{part}] record #5 offset {entry.offset}: tampered" in bad.stdout, bad.stdout

    # Put it back, then delete that record instead.
    _edit(path, key, original)
    assert verify(path).ok
    _edit(path, key, None)
    problems = verify(path).problems
    assert [(p.kind, p.seq) for p in problems] == [("missing", 5)], problems
    assert "records #5..#5 are gone after offset" in problems[0].message

    # Deleting the newest record leaves a chain that is internally consistent; the head still counts it.
    _edit(path, key, original)
    last = report.entries[(topic, part)] - 1
    _edit(path, entry_key(topic, part, last), None)
    assert [(p.kind, p.seq) for p in verify(path).problems] == [("missing", last)]


def _delete_before(settings: Settings, partition: int, offset: int) -> None:
    """What retention does: the partition's records before ``offset`` are gone."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
    futures = admin.delete_records([TopicPartition(settings.topic_events, partition, offset)], request_timeout=30)
    for f in futures.values():
        assert f.result(30).low_watermark == offset


def test_a_position_retention_deleted_stops_the_projections_unless_an_operator_restarts_them(settings: Settings) -> None:
    """auto.offset.reset=earliest skipped ahead silently and the audit chain took the jump; now the projections stop
    with OFFSET_OUT_OF_RANGE, and a restart at a stated position is an entry of the chain."""
    from app.read_models import open_writer
    from projections.db import DbProjection
    from projections.runner import OffsetOutOfRange

    def junk(n: int, start: int) -> list[tuple[bool, int, bytes, bytes]]:
        return [(True, 0, b"o", b"junk-%d" % i) for i in range(start, start + n)]

    path = settings.var_dir / "audit"
    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections, junk(10, 0))
    assert _run(settings, path)[0].appended == 10
    db_cfg = RunnerConfig(bootstrap=settings.kafka_bootstrap, topics=(settings.topic_events,), group_id="t-db",
                          stop_when_caught_up=True, lag_interval_s=60)
    Runner(db_cfg, DbProjection(open_writer(settings))).run()
    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections, junk(10, 10))
    _delete_before(settings, 0, 15)  # offsets 10..14 were never read by either projection

    with pytest.raises(OffsetOutOfRange) as stopped:
        _run(settings, path)
    assert stopped.value.code == "OFFSET_OUT_OF_RANGE" and "position 10 is out of range" in stopped.value.message
    with pytest.raises(OffsetOutOfRange):
        Runner(db_cfg, DbProjection(open_writer(settings))).run()
    assert verify(path).entries[(settings.topic_events, 0)] == 10, "nothing appended past the hole"

    env = {**os.environ, "ARBITER_VAR_DIR": str(settings.var_dir), "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "ARBITER_TOPIC_EVENTS": settings.topic_events, "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections,
           "ARBITER_TOPIC_COMMANDS": settings.topic_commands}  # the audit projection also reads <commands>-parked-log
    cli = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]
    refused = subprocess.run([*cli, "project", "audit", "--until-caught-up"], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
    assert refused.returncode == 2 and "[OFFSET_OUT_OF_RANGE]" in refused.stderr, refused.stderr
    restarted = subprocess.run([*cli, "project", "audit", "--until-caught-up", "--reset-out-of-range", "earliest"],
                               env=env, capture_output=True, text=True, timeout=60, check=False)
    assert restarted.returncode == 0, restarted.stderr
    report = verify(path)
    assert report.ok, report.problems
    assert report.entries[(settings.topic_events, 0)] == 10 + 1 + 5, "ten records, the restart, offsets 15..19"
    (restart,) = report.restarts
    assert "resumed at offset 15, offsets from 10 never read" in restart
    shown = subprocess.run([*cli, "audit", "verify"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0 and "RESTART " in shown.stdout and "audit trail intact" in shown.stdout, shown.stdout

    db_restart = RunnerConfig(**{**db_cfg.__dict__, "reset_out_of_range": "latest"})
    Runner(db_restart, DbProjection(open_writer(settings))).run()
    writer = open_writer(settings)
    assert writer.offsets()[(settings.topic_events, 0)] == 20
    writer.close()
