"""One contract for both state backends (``spark`` = transformWithState, ``rocksdb`` = per-partition rocksdict).

Each test runs against each backend on its own topics and must see exactly what ``commands.decide``
predicts when run directly over the same commands: the same records, byte for byte, for the same input.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from cloudevents.core.bindings.kafka import KafkaMessage, from_binary
from cloudevents.core.formats.json import JSONFormat

from app.settings import Settings
from app.validator.job import drain
from app.validator.murmur2 import partition_for
from app.validator.topic_io import produce, read_all
from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    GrantReader,
    ObjectState,
    ReasonCode,
    RevokeEditor,
    UpdateObject,
)
from schemas import codec
from tests.integration.validator_oracle import Out, expected_outputs, send_commands, topic_outputs

pytestmark = pytest.mark.integration

T0 = datetime(2025, 6, 1, tzinfo=UTC)


@pytest.fixture(params=["spark", "rocksdb"])
def backend(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The test's settings with ``state_backend`` set to the parametrized backend."""
    return settings.model_copy(update={"state_backend": request.param})


def _at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def _life(obj: str, n: int) -> list[Command]:
    create = CreateObject(f"{obj}-c", obj, "alice", _at(n), document='{"a": 1}')
    return [
        UpdateObject(f"{obj}-u0", obj, "alice", _at(n), patch="{}"),  # NOT_FOUND
        create, create,  # DUPLICATE
        GrantReader(f"{obj}-g0", obj, "alice", _at(n + 1), reader="bob"),
        UpdateObject(f"{obj}-u1", obj, "bob", _at(n + 1), patch="{}"),  # FORBIDDEN (a reader)
        UpdateObject(f"{obj}-u1", obj, "eve", _at(n + 1), patch="{}"),  # NOT_FOUND (may not read it)
        GrantEditor(f"{obj}-g", obj, "alice", _at(n + 2), editor="bob"),
        UpdateObject(f"{obj}-u2", obj, "bob", _at(n + 3), expected_version=3, patch='{"b": 2}'),
        UpdateObject(f"{obj}-u2", obj, "bob", _at(n + 3), patch='{"b": 3}'),  # IDEMPOTENCY_KEY_REUSED
        UpdateObject(f"{obj}-u3", obj, "alice", _at(n + 4), expected_version=1, patch="{}"),  # VERSION_CONFLICT
        RevokeEditor(f"{obj}-r", obj, "alice", _at(n + 5), editor="bob"),
        DeleteObject(f"{obj}-d", obj, "alice", _at(n + 6)),
        CreateObject(f"{obj}-c2", obj, "carol", _at(n + 7), document="{}"),  # DELETED
    ][: 1 + n % 13]


def _per_key(records: list[Out]) -> dict[bytes | None, list[Out]]:
    """Group by key in topic order: the order that matters is an object's own (the sink interleaves keys freely)."""
    by: dict[bytes | None, list[Out]] = defaultdict(list)
    for r in records:
        by[r[1]].append(r)
    return {k: sorted(v, key=lambda r: (r[0], codec.decode_outcome(r[2]).occurred_at or T0)) for k, v in by.items()}


def test_sequences_poison_and_misrouted_records_give_what_decide_predicts(spark, backend: Settings) -> None:  # noqa: ANN001
    s = backend
    lives = [_life(f"obj-{i}", i) for i in range(24)]
    commands = [c for step in range(10) for life in lives for c in life[step:step + 1]]  # interleave objects
    send_commands(s, commands)
    poison = b"\x07not the wire format"
    misrouted_key = b"obj-3"
    wrong = (partition_for(misrouted_key, s.partitions) + 1) % s.partitions
    misrouted = codec.encode_command(CreateObject("mis", "obj-3", "mallory", _at(0), document="{}"))
    produce(s, [(b"obj-1", poison)])
    [(mp, mo)] = produce(s, [(misrouted_key, misrouted)], partition=wrong)
    send_commands(s, [UpdateObject("after-poison", "obj-1", "alice", _at(50), patch="{}")])
    drain(spark, s, timeout=180)

    states: dict[str, ObjectState | None] = {}
    expected = expected_outputs(commands, s, states) + expected_outputs(
        [UpdateObject("after-poison", "obj-1", "alice", _at(50), patch="{}")], s, states)
    got = topic_outputs(s)
    rejections = {r[2]: codec.decode_rejection(r[2]) for r in got if r[0] == s.topic_rejections}
    bad = [rej for rej in rejections.values() if rej.original is not None]
    assert sorted((r.reason, r.original.value, r.original.partition) for r in bad) == sorted([  # type: ignore[union-attr]
        (ReasonCode.MALFORMED, poison, partition_for(b"obj-1", s.partitions)),
        (ReasonCode.MISROUTED, misrouted, mp)])
    assert [r for r in bad if r.reason == ReasonCode.MISROUTED][0].original.offset == mo  # type: ignore[union-attr]
    decided = [r for r in got if r[2] not in {codec.encode_rejection(b) for b in bad}]
    assert _per_key(decided) == _per_key(expected)
    assert len(decided) == len(expected)


def test_restart_keeps_state(spark, backend: Settings) -> None:  # noqa: ANN001
    s = backend
    first = [CreateObject(f"r-{i}", f"r{i}", "alice", _at(i), document="{}") for i in range(8)]
    send_commands(s, first)
    drain(spark, s, timeout=180)
    second = [CreateObject(f"r2-{i}", f"r{i}", "bob", _at(20 + i), document="{}") for i in range(8)] + [
        UpdateObject(f"r3-{i}", f"r{i}", "alice", _at(40 + i), expected_version=1, patch="{}") for i in range(8)]
    send_commands(s, second)
    drain(spark, s, timeout=180)
    states: dict[str, ObjectState | None] = {}
    assert _per_key(topic_outputs(s)) == _per_key(expected_outputs(first + second, s, states))


def test_expired_dedup_entry_and_tombstone_no_longer_match(spark, backend: Settings) -> None:  # noqa: ANN001
    ttl_ms = 3000
    s = backend.model_copy(update={"dedup_ttl_ms": ttl_ms, "tombstone_ttl_ms": ttl_ms})
    create = CreateObject("t-c1", "kept", "alice", _at(0), document="{}")
    gone = CreateObject("t-c2", "gone", "alice", _at(0), document="{}")
    send_commands(s, [create, create, gone, DeleteObject("t-d2", "gone", "alice", _at(1))])
    drain(spark, s, timeout=180)
    started = time.monotonic()
    first = [codec.decode_rejection(r.value) for r in read_all(s, s.topic_rejections)]
    assert [(r.command_id, r.reason) for r in first] == [("t-c1", ReasonCode.DUPLICATE)]
    time.sleep(max(0.0, ttl_ms / 1000 + 1 - (time.monotonic() - started)))
    send_commands(s, [create, UpdateObject("t-u2", "gone", "alice", _at(2), patch="{}")])
    drain(spark, s, timeout=180)
    later = [codec.decode_rejection(r.value) for r in read_all(s, s.topic_rejections)][len(first):]
    assert sorted((r.command_id, r.reason) for r in later) == [
        ("t-c1", ReasonCode.ALREADY_EXISTS), ("t-u2", ReasonCode.NOT_FOUND)]


def test_every_output_is_a_cloudevent_the_sdk_reads(spark, backend: Settings) -> None:  # noqa: ANN001
    """Every event and rejection carries CloudEvents' Kafka binary-mode headers; the Python SDK reads them back."""
    s = backend
    commands = _life("ce-obj", 12) + _life("ce-other", 10)  # every event type but READER_REVOKED, and rejections
    send_commands(s, commands)
    produce(s, [(b"ce-obj", b"\x07not the wire format")])  # a rejection with neither object nor time
    drain(spark, s, timeout=180)
    records = [r for t in (s.topic_events, s.topic_rejections) for r in read_all(s, t)]
    assert len(records) == len(commands) + 1
    types = set()
    for r in records:
        names = [k for k, _ in r.headers]
        assert len(names) == len(set(names)) and names[0] == "ce_specversion" and names[-1] == "content-type"
        ce = from_binary(KafkaMessage(dict(r.headers), r.key, r.value or b""), JSONFormat())
        outcome = codec.decode_outcome(r.value)  # type: ignore[arg-type]
        assert ce.get_specversion() == "1.0"
        assert ce.get_source() == f"/arbiter/topics/{s.topic_commands}"
        assert ce.get_datacontenttype() == "application/avro"
        assert ce.get_subject() == outcome.object_id
        if outcome.occurred_at is not None:  # else no ce_time header (checked below): the SDK puts "now" there
            assert ce.get_time() == outcome.occurred_at
        if isinstance(outcome, Event):
            assert r.topic == s.topic_events
            assert (ce.get_id(), ce.get_type()) == (outcome.event_id, f"arbiter.object.{outcome.type.value.lower()}")
        else:
            assert r.topic == s.topic_rejections
            assert (ce.get_id(), ce.get_type()) == (outcome.rejection_id, "arbiter.command.rejected")
        types.add(ce.get_type())
    assert {"arbiter.object.created", "arbiter.object.updated", "arbiter.object.deleted",
            "arbiter.object.editor_granted", "arbiter.command.rejected"} <= types
    assert sum("ce_subject" not in dict(r.headers) and "ce_time" not in dict(r.headers) for r in records) == 1


def test_unsigned_forged_and_other_key_records_are_rejected_unauthenticated(spark, backend: Settings) -> None:  # noqa: ANN001
    """Only records signed by Arbiter's producers are decided; the rest are rejected UNAUTHENTICATED, keeping their
    original coordinates, and change nothing; the stream goes on (issue 27)."""
    from confluent_kafka import Producer
    from pydantic import SecretStr

    from app.signing import SIGNATURE_HEADER, signer_for

    s = backend
    key = b"sig-obj"
    send_commands(s, [CreateObject("sig-c", "sig-obj", "alice", _at(0), document="{}")])
    placed: list[tuple[int, int]] = []

    def raw(value: bytes, headers: list[tuple[str, bytes]] | None) -> None:
        p = Producer({"bootstrap.servers": s.kafka_bootstrap, "partitioner": "murmur2_random"})
        p.produce(s.topic_commands, key=key, value=value, headers=headers,
                  on_delivery=lambda err, msg: placed.append((msg.partition(), msg.offset())))
        assert p.flush(30) == 0

    unsigned = codec.encode_command(UpdateObject("sig-u1", "sig-obj", "alice", _at(1), patch='{"x": 1}'))
    raw(unsigned, None)
    genuine = codec.encode_command(UpdateObject("sig-u2", "sig-obj", "bob", _at(2), patch='{"x": 2}'))
    forged = codec.encode_command(UpdateObject("sig-u2", "sig-obj", "alice", _at(2), patch='{"x": 2}'))
    raw(forged, [(SIGNATURE_HEADER, signer_for(s).sign(key, genuine))])  # bob's signature, principal changed
    attacker = s.model_copy(update={"record_keys": {"derived": SecretStr("not-the-key-" + "x" * 32)}})
    other_key = codec.encode_command(UpdateObject("sig-u3", "sig-obj", "alice", _at(3), patch='{"x": 3}'))
    raw(other_key, signer_for(attacker).headers(key, other_key))  # the right key id, another key
    send_commands(s, [UpdateObject("sig-u4", "sig-obj", "alice", _at(4), patch='{"x": 4}')])
    drain(spark, s, timeout=180)

    rejections = [codec.decode_rejection(r.value) for r in read_all(s, s.topic_rejections)]
    refused = [r for r in rejections if r.reason is ReasonCode.UNAUTHENTICATED]
    assert [(r.original.value, r.original.partition, r.original.offset) for r in refused] == [  # type: ignore[union-attr]
        (unsigned, *placed[0]), (forged, *placed[1]), (other_key, *placed[2])]
    assert all(r.object_id == "sig-obj" for r in refused)
    events = [codec.decode_event(r.value) for r in read_all(s, s.topic_events)]
    assert [(e.command_id, e.version) for e in events] == [("sig-c", 1), ("sig-u4", 2)]  # the forged changed nothing


def _orders(n: int, start: int, step: int) -> list[Command]:
    """Order ``start``..``start+n``'s commands of phase ``step`` (0: create, 1: walk the status machine and the
    finance guard, 2: approve again and try to change the customer)."""
    out: list[Command] = []
    for i in range(start, start + n):
        oid, at = f"ord{i}", _at(1000 + 10 * i + step)
        amount = 12000 if i % 2 else 5000
        if step == 0:
            doc = f'{{"title":"t{i}","priority":{1 + i % 5},"customer":"c{i}","amount":{amount},"status":"draft"}}'
            out.append(CreateObject(f"{oid}-c", oid, "alice", at, document=doc, object_type="order"))
        elif step == 1:
            out += [UpdateObject(f"{oid}-skip", oid, "alice", at, patch='{"status":"approved"}'),  # status-flow
                    UpdateObject(f"{oid}-sub", oid, "alice", at, patch='{"status":"submitted"}'),
                    UpdateObject(f"{oid}-a1", oid, "alice", at, patch='{"status":"approved"}')]  # guard if > limit
        else:
            out += [UpdateObject(f"{oid}-a2", oid, "alice", at, patch='{"status":"approved"}'),
                    UpdateObject(f"{oid}-cust", oid, "alice", at, patch='{"customer":"other"}', groups=("finance",))]
    return out


def test_rules_deployed_mid_stream_decide_as_the_sequential_oracle_predicts(spark, backend: Settings) -> None:  # noqa: ANN001
    """The order example deployed between two phases and its limit raised before a third: both backends write what
    ``decide`` over the commands topic in offset order, switching rules at the control records, predicts."""
    from app.rules.deploy import deploy
    from app.run.scenario import ORDERS, raised_limit
    from tests.integration.validator_oracle import assert_topics_equal_the_topic_oracle

    s = backend.model_copy(update={"max_offsets_per_trigger": 50})
    send_commands(s, _orders(4, 0, 0))  # typed creates with no rules deployed: RULE_VIOLATED "types"
    v1 = deploy(s, ORDERS.read_text(), principal="ops").deploy.version
    send_commands(s, _orders(12, 10, 0) + _orders(12, 10, 1))
    v2 = deploy(s, raised_limit(ORDERS.read_text()), principal="ops").deploy.version
    send_commands(s, _orders(12, 10, 2))
    drain(spark, s, timeout=240)
    assert_topics_equal_the_topic_oracle(s)
    seen = defaultdict(int)
    for r in topic_outputs(s):
        o = codec.decode_outcome(r[2])
        seen[(getattr(o, "rule", None), o.rules_version)] += 1
        ce = from_binary(KafkaMessage(dict(r[4]), r[1], r[2] or b""), JSONFormat())  # the SDK reads the extension
        assert ce.get_extension("rulesversion") == (None if o.rules_version is None else str(o.rules_version))
    assert seen[("types", None)] == 4  # no rules deployed yet
    assert seen[("order:status-flow", v1)] == 12
    assert seen[("order:finance-approves-large", v1)] == 6  # the six orders over 10,000
    assert seen[("order:customer-immutable", v2)] == 12
    assert not any(rule == "order:finance-approves-large" and v == v2 for rule, v in seen)  # 50,000 under v2
