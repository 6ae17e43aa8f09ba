"""The reference validator end to end: real broker, real Spark, outcomes compared with ``commands.decide``."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.errors import SetupError
from app.settings import Settings, checkpoint_uri
from app.validator.job import build_query, drain
from app.validator.murmur2 import partition_for
from app.validator.progress import progress_path
from app.validator.topic_io import produce, read_all
from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    GrantReader,
    ReasonCode,
    Rejection,
    RevokeEditor,
    UpdateObject,
)
from schemas import codec
from tests.integration.validator_oracle import (
    assert_topics_equal_the_topic_oracle,
    decided,
    expected_outputs,
    kill_mid_stream,
    rules_versions_seen,
    send_commands,
    send_with_deploys,
    start_validator,
    topic_outputs,
)

pytestmark = pytest.mark.integration

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def _scenario(obj: str, n: int) -> list[Command]:
    """A mixed life of one object: accepted and rejected commands of every kind, retries included."""
    create = CreateObject(f"{obj}-c0", obj, "alice", _at(n), document='{"a": 1}')
    return [
        UpdateObject(f"{obj}-u-early", obj, "alice", _at(n), patch='{"a": 0}'),  # NOT_FOUND
        create,
        create,  # retry -> DUPLICATE
        GrantReader(f"{obj}-g0", obj, "alice", _at(n + 1), reader="bob"),
        UpdateObject(f"{obj}-u1", obj, "bob", _at(n + 1), patch='{"b": 2}'),  # FORBIDDEN (a reader)
        UpdateObject(f"{obj}-u1", obj, "eve", _at(n + 1), patch='{"b": 2}'),  # NOT_FOUND (may not read it)
        GrantEditor(f"{obj}-g1", obj, "alice", _at(n + 2), editor="bob"),
        UpdateObject(f"{obj}-u2", obj, "bob", _at(n + 3), expected_version=3, patch='{"b": 2}'),
        UpdateObject(f"{obj}-u2", obj, "bob", _at(n + 3), patch='{"b": 3}'),  # IDEMPOTENCY_KEY_REUSED
        UpdateObject(f"{obj}-u3", obj, "alice", _at(n + 4), expected_version=3, patch='{"c": 3}'),  # VERSION_CONFLICT
        UpdateObject(f"{obj}-u4", obj, "alice", _at(n + 5), patch="[1]"),  # MALFORMED patch
        RevokeEditor(f"{obj}-r1", obj, "alice", _at(n + 6), editor="bob"),
        DeleteObject(f"{obj}-d1", obj, "alice", _at(n + 7)),
        UpdateObject(f"{obj}-u5", obj, "alice", _at(n + 8), patch='{"d": 4}'),  # DELETED
        CreateObject(f"{obj}-c2", obj, "carol", _at(n + 9), document="{}"),  # DELETED (ids not reused)
    ][: max(1, n % 16)]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """This file tests the reference backend (transformWithState) itself, whatever the default is."""
    return settings.model_copy(update={"state_backend": "spark"})


def test_sequences_match_decide(spark, settings: Settings) -> None:  # noqa: ANN001
    solo = _scenario("solo", 12)  # one object through its whole life
    many = [c for i in range(30) for c in _scenario(f"obj-{i}", i + 3)]
    commands = solo + many
    send_commands(settings, commands)

    drain(spark, settings, timeout=180)

    got = topic_outputs(settings)
    want = expected_outputs(commands, settings)
    assert Counter(got) == Counter(want)  # byte for byte, on the partition of the command
    # Per object, events come out in version order on one partition.
    events = [codec.decode_event(v) for t, _, v, _, _ in got if t == settings.topic_events]
    solo_versions = [e.version for e in events if e.object_id == "solo"]
    assert solo_versions == [1, 2, 3, 4, 5]
    reasons = Counter(codec.decode_rejection(v).reason for t, _, v, _, _ in got if t == settings.topic_rejections)
    assert {ReasonCode.NOT_FOUND, ReasonCode.DUPLICATE, ReasonCode.FORBIDDEN, ReasonCode.VERSION_CONFLICT,
            ReasonCode.MALFORMED, ReasonCode.DELETED, ReasonCode.IDEMPOTENCY_KEY_REUSED} <= set(reasons)

    progress = json.loads(progress_path(settings).read_text())
    assert progress["numInputRows"] == len(commands)
    assert progress["stateOperators"][0]["numRowsTotal"] > 0


def test_poison_bytes_become_rejections_and_the_object_goes_on(spark, settings: Settings) -> None:  # noqa: ANN001
    obj = "victim"
    key = obj.encode()
    create = CreateObject("p-c1", obj, "alice", _at(0), document="{}")
    update = UpdateObject("p-u1", obj, "alice", _at(1), patch='{"x": 1}')
    other = CreateObject("p-c2", "someone-else", "alice", _at(2), document="{}")
    unknown_schema = b"\x00\x00\x00\x99\x99" + codec.encode_command(update)[5:]
    records = [
        (key, codec.encode_command(create)),
        (key, b"\xff garbage"),                 # bad magic
        (key, unknown_schema),                  # unknown schema id
        (key, codec.encode_command(create)[:9]),  # truncated body
        (key, None),                            # no value
        (key, codec.encode_command(other)),     # key is not the object id
        (None, b"\x00"),                        # no key, too short
        (key, codec.encode_command(update)),
    ]
    part = partition_for(key, settings.partitions)
    produce(settings, records, partition=part)
    misrouted = produce(settings, [(key, codec.encode_command(UpdateObject("p-u2", obj, "alice", _at(3), patch="{}")))],
                        partition=(part + 1) % settings.partitions)

    drain(spark, settings, timeout=180)

    events = [codec.decode_event(r.value) for r in read_all(settings, settings.topic_events)]
    assert [(e.command_id, e.version) for e in events] == [("p-c1", 1), ("p-u1", 2)]
    rejections = read_all(settings, settings.topic_rejections)
    decoded = [codec.decode_rejection(r.value) for r in rejections]
    by_offset = {rej.original.offset: (rej, rec) for rej, rec in zip(decoded, rejections, strict=True)}
    reasons = {off: rej.reason for off, (rej, _) in by_offset.items() if rej.original.partition == part}
    assert reasons == {1: ReasonCode.MALFORMED, 2: ReasonCode.UNSUPPORTED_SCHEMA, 3: ReasonCode.MALFORMED,
                       4: ReasonCode.MALFORMED, 5: ReasonCode.MALFORMED, 6: ReasonCode.MALFORMED}
    for off, (rej, rec) in by_offset.items():
        if rej.original.partition != part:
            continue
        assert rej.original.topic == settings.topic_commands
        assert (rej.original.key, rej.original.value) == records[off]
        assert rec.partition == part  # written where the bad command was read
    mis = [rej for rej in decoded if rej.reason == ReasonCode.MISROUTED]
    assert len(mis) == 1 and (mis[0].original.partition, mis[0].original.offset) == misrouted[0]
    assert mis[0].object_id == obj


def _latest_commit(uri: str) -> Path:
    commits = sorted((Path(uri) / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    return [p for p in commits if p.name.isdigit()][-1]


def test_restart_keeps_state_and_a_replayed_batch_writes_identical_records(spark, settings: Settings) -> None:  # noqa: ANN001
    first = [CreateObject(f"r-c{i}", f"r-{i}", "alice", _at(i), document="{}") for i in range(6)]
    send_commands(settings, first)
    drain(spark, settings, timeout=180)

    # Restart from the checkpoint: the objects still exist.
    again = [CreateObject(f"r-c{i}-again", f"r-{i}", "bob", _at(10 + i), document="{}") for i in range(6)]
    updates = [UpdateObject(f"r-u{i}", f"r-{i}", "alice", _at(20 + i), expected_version=1, patch='{"v": 1}')
               for i in range(6)]
    send_commands(settings, again + updates)
    drain(spark, settings, timeout=180)
    after_second = topic_outputs(settings)
    decoded = [codec.decode_outcome(v) for _, _, v, _, _ in after_second]
    assert sorted(r.command_id for r in decoded if isinstance(r, Rejection)) == sorted(c.command_id for c in again)
    assert all(r.reason == ReasonCode.ALREADY_EXISTS for r in decoded if isinstance(r, Rejection))
    assert sorted((e.object_id, e.version) for e in decoded if isinstance(e, Event) and e.version == 2) == [
        (f"r-{i}", 2) for i in range(6)]

    # A kill between the sink write and the commit leaves the batch uncommitted: Spark runs it again. Imitated
    # here so the replay surely happens; test_kill_9_mid_stream_then_restart_decides_exactly_the_rest kills for real.
    latest = _latest_commit(checkpoint_uri(settings))
    latest.unlink()
    latest.with_name(f".{latest.name}.crc").unlink(missing_ok=True)  # a kill before the commit leaves neither
    drain(spark, settings, timeout=180)
    after_replay = topic_outputs(settings)
    assert len(after_replay) > len(after_second), "the batch was not replayed"
    assert set(after_replay) == set(after_second)  # duplicates of identical records only

    # The first run fixed the shuffle partitions and the backend; a change is refused, not obeyed.
    with pytest.raises(SetupError, match="shuffle_partitions"):
        build_query(spark, settings.model_copy(update={"shuffle_partitions": 2}))


def _stream(n: int, objects: int) -> list[Command]:
    """``n`` commands over ``objects`` objects, each with its own id: creates, then accepted and refused changes."""
    out: list[Command] = []
    for i in range(n):
        obj = f"k{i % objects}"
        if i < objects:
            out.append(CreateObject(f"c{i}", obj, "alice", _at(i), document='{"a": 1}'))
        elif i % 53 == 0:
            out.append(DeleteObject(f"d{i}", obj, "alice", _at(i)))
        elif i % 7 == 0:
            out.append(UpdateObject(f"u{i}", obj, "alice", _at(i), expected_version=1, patch="{}"))  # mostly stale
        else:
            out.append(UpdateObject(f"u{i}", obj, "alice" if i % 5 else "bob", _at(i), patch='{"b": 1}'))
    return out


def test_kill_9_mid_stream_then_restart_decides_exactly_the_rest(spark, settings: Settings, tmp_path: Path) -> None:  # noqa: ANN001
    """Two rules deploys (and a forged one) in the middle of the stream: after the kill and the restart the topics
    hold exactly what the sequential oracle predicts from the commands topic, rules switching at the control
    records."""
    s = settings.model_copy(update={"max_offsets_per_trigger": 100})
    commands = _stream(900, 90)
    send_with_deploys(s, commands)
    log = tmp_path / "job.log"
    at_kill = kill_mid_stream(start_validator(s, log), s, commands, log)  # a third decided, the rest not
    drain(spark, s, timeout=180)  # the restart, from the killed job's checkpoint
    assert_topics_equal_the_topic_oracle(s)
    assert len(at_kill) < len(commands) <= len(decided(s)[1])
    assert {c.command_id for c in commands} <= {cid for _, cid in decided(s)[1]}
    seen = rules_versions_seen(s)
    assert seen[None] and seen[1] and seen[2], seen  # decisions under no rules, version 1 and version 2


def test_expired_dedup_entry_and_tombstone_no_longer_match(spark, settings: Settings) -> None:  # noqa: ANN001
    ttl_ms = 4000
    s = settings.model_copy(update={"dedup_ttl_ms": ttl_ms, "tombstone_ttl_ms": ttl_ms})
    create = CreateObject("t-c1", "kept", "alice", _at(0), document="{}")
    gone = CreateObject("t-c2", "gone", "alice", _at(0), document="{}")
    delete = DeleteObject("t-d2", "gone", "alice", _at(1))
    send_commands(s, [create, create, gone, delete])  # the retry in the same batch is a DUPLICATE
    drain(spark, s, timeout=180)
    started = time.monotonic()

    first = [codec.decode_rejection(r.value) for r in read_all(s, s.topic_rejections)]
    assert [(r.command_id, r.reason) for r in first] == [("t-c1", ReasonCode.DUPLICATE)]

    time.sleep(max(0.0, ttl_ms / 1000 + 1 - (time.monotonic() - started)))
    # Same command id, same issued_at (event-time dedup would still match): only processing-time TTL expired it.
    send_commands(s, [create, UpdateObject("t-u2", "gone", "alice", _at(2), patch="{}")])
    drain(spark, s, timeout=180)
    later = [codec.decode_rejection(r.value) for r in read_all(s, s.topic_rejections)][len(first):]
    assert sorted((r.command_id, r.reason) for r in later) == [
        ("t-c1", ReasonCode.ALREADY_EXISTS),  # not DUPLICATE: the dedup entry expired, the object did not
        ("t-u2", ReasonCode.NOT_FOUND),       # not DELETED: the tombstone expired
    ]
