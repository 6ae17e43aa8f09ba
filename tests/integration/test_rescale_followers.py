"""After ``arbiter rescale``, everything that reads the commands topic follows the generations (issue 42), on a real
broker and real Spark: the archive archives the new generation's topic (discovered after its checkpoint began),
``verify replay`` re-decides an object's commands across generations clean, ``rules what-if`` flips what a
sequential ``decide`` predicts on the new generation's records, an erasure nulls every generation's rows, the status
page's lag is the current generation's, and a record a direct producer writes to the closed topic is rejected
``MISROUTED`` and parked whole, which verify expects.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.archive.erase import erase_archive
from app.archive.query import start as start_archive
from app.parked.lot import find
from app.rescale.generation import GenerationWatch, generation_settings
from app.rescale.late import LateRecords
from app.rescale.steps import rescale
from app.rules.deploy import deploy
from app.settings import Settings
from app.status.collector import StatusCollector
from app.validator.job import drain
from app.validator.murmur2 import partition_for
from app.validator.topic_io import produce, read_all
from app.verify.replay import replay
from app.verify.whatif import what_if
from commands import Command, CreateObject, DeleteObject, ReasonCode, UpdateObject
from commands.rules import canonical_rules
from projections import archived
from schemas import codec, parked
from tests.integration.test_verify import ORDERS, TIGHTER, _orders, _sequential_flips
from tests.integration.validator_oracle import send_commands

pytestmark = pytest.mark.integration

T0 = datetime(2026, 2, 1, tzinfo=UTC)


def _plain(i: int, kind: str, at: int) -> Command:
    oid, when = f"plain-{i}", T0 + timedelta(seconds=at)
    if kind == "create":
        return CreateObject(f"c{i}", oid, "alice", when, document='{"n": 0}')
    if kind == "delete":
        return DeleteObject(f"d{i}", oid, "alice", when)
    return UpdateObject(f"{kind}{i}", oid, "alice" if i % 3 else "bob", when, patch=f'{{"n": {at}}}')


def test_archive_verify_what_if_erasure_status_and_late_records_follow_a_rescale(spark, settings: Settings,  # noqa: ANN001
                                                                                 tmp_path: Path) -> None:
    s = settings.model_copy(update={"state_backend": "rocksdb", "archive_uri": str(tmp_path / "archive")})
    orders = _orders()  # per order: create, submit, approve (not finance), approve (finance)
    gen0 = [_plain(i, "create", i) for i in range(12)] + [_plain(i, "u", 20 + i) for i in range(12)]
    send_commands(s, gen0)
    deploy(s, ORDERS.read_text(), principal="ops:test")
    send_commands(s, [c for c in orders if c.command_id.startswith(("oc", "os"))])
    drain(spark, s, timeout=240)
    start_archive(spark, s, available_now=True).awaitTermination(240)  # its checkpoint knows generation 0 only

    g1 = rescale(s, 6, wait_s=60)
    s1 = generation_settings(s)
    assert s1.topic_commands == g1.topic
    retry = gen0[-1]  # decided in generation 0: DUPLICATE in generation 1, its dedup window carried over
    gen1 = [_plain(i, "v", 40 + i) for i in range(12)] + [_plain(i, "delete", 60 + i) for i in range(0, 12, 4)]
    send_commands(s1, [retry, *gen1, *[c for c in orders if c.command_id.startswith(("oa", "of"))]])
    drain(spark, s1, timeout=240)

    # A producer that writes to Kafka directly, still on the closed topic: the record is rejected and parked.
    late = CreateObject("late-1", "late-object", "alice", T0, document='{"n": 0}')
    [(p, o)] = produce(s, [(b"late-object", codec.encode_command(late))])
    sweeper = LateRecords(s)
    assert [c[0].topic_commands for c in sweeper.closed] == [s.topic_commands]
    assert sweeper.sweep() == 1 and sweeper.sweep() == 0  # its progress is committed: handled once
    [rejected] = [codec.decode_rejection(r.value) for r in read_all(s, s.topic_rejections)
                  if r.key == b"late-object"]
    assert rejected.reason == ReasonCode.MISROUTED and g1.topic in rejected.message
    entry = find(s, f"{s.topic_commands}[{p}]@{o}")
    assert entry.record.value == codec.encode_command(late) and entry.record.signature_state == parked.VALID

    start_archive(spark, s, available_now=True).awaitTermination(240)
    root = archived.local_root(s.archive_location)
    parts, offsets, _, _, _ = archived.read_topic(root, g1.topic)  # the new topic, whole
    assert sorted(zip(parts, offsets, strict=True)) == [(r.partition, r.offset) for r in read_all(s, g1.topic)]

    report = replay(spark, s)
    decisions = len(gen0) + len(orders) + 1 + len(gen1)  # the late record is no decision; the deploy none either
    assert report.divergences == 0, report.first
    assert report.commands == decisions and report.expected == report.stored > decisions, report

    whatif = what_if(spark, s, canonical_rules(TIGHTER))
    assert whatif.commands == decisions
    flips = whatif.flips
    expected = _sequential_flips(canonical_rules(TIGHTER))
    assert expected and {(f.command_id, f.direction) for f in flips} == expected
    assert {f.topic for f in flips} == {g1.topic}  # the approvals were decided in generation 1, at those coordinates
    assert all(f.partition == partition_for(f.object_id.encode(), 6) for f in flips if f.object_id)

    erased = erase_archive(root, "plain-0")  # created in generation 0, deleted in generation 1
    assert erased.rows and {archived.partition_values(f)["topic"] for f in erased.files} >= {s.topic_commands,
                                                                                              g1.topic}

    collector = StatusCollector(s)
    collector.follow(GenerationWatch(s))
    try:
        lag = collector.snapshot()["lag_by_partition"]
    finally:
        collector.close()
    assert sorted(lag, key=int) == [str(i) for i in range(6)]  # the current generation's partitions
