"""The size chain on a real broker and real Spark, at its exact boundaries, for both state backends.

The largest document the chain accepts is decided ACCEPTED and its event is on ``events``; one byte more is
TOO_LARGE; records up to the topic's maximum put on ``commands`` by another producer (garbage, a huge key, a
command with huge ids whose rejection would not fit) all come out as rejections that fit; every record is
decided, the drain completes, and the topics hold exactly what the shared fold computes.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

from app.api.writes.producer import producer_config
from app.limits import SIGNATURE_HEADER_BYTES, for_settings, warnings_bytes
from app.settings import Settings
from app.signing import SIGNATURE_HEADER, RecordSigner, signer_for
from app.topics import admin, ensure_topics
from app.validator.fold import InputRecord, OutputRecord, fold, limits_for
from app.validator.job import drain
from app.validator.murmur2 import partition_for
from app.validator.outputs import outcome_record, record_size
from app.validator.topic_io import read_all
from commands import CreateObject, DeleteObject, Event, ReasonCode, Rejection, UpdateObject, decide
from schemas import codec
from tests.integration.validator_oracle import topic_outputs

pytestmark = pytest.mark.integration

AT = datetime(2025, 6, 1, tzinfo=UTC)


@pytest.fixture(params=["rocksdb", "spark"])
def backend(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    return settings.model_copy(update={"state_backend": request.param})


def utf8_id(n_bytes: int, tag: str) -> str:
    """An id of exactly ``n_bytes`` UTF-8 bytes, mostly 4-byte characters."""
    head = tag + "\U0001f600" * ((n_bytes - len(tag.encode())) // 4)
    text = head + "x" * (n_bytes - len(head.encode()))
    assert len(text.encode()) == n_bytes
    return text


def utf8_object(n_bytes: int) -> str:
    """The JSON text of an object of exactly ``n_bytes`` UTF-8 bytes."""
    return '{"a":"' + utf8_id(n_bytes - 8, "é") + '"}'


def _send(conf: dict, topic: str, records: list[tuple[bytes | None, bytes | None, int | None]],
          signer: RecordSigner | None = None) -> None:
    """Produce ``records`` one at a time; with ``signer`` each carries its signature header, as the API's do."""
    errors: list[object] = []
    p = Producer(conf)
    for key, value, partition in records:
        extra = {} if partition is None else {"partition": partition}
        if signer is not None and value is not None:
            extra["headers"] = signer.headers(key, value)
        p.produce(topic, value, key, on_delivery=lambda err, _m: errors.append(err) if err else None, **extra)
        p.flush(30)  # one at a time: offsets follow the list
    assert not errors, errors


def _max_message_bytes(s: Settings, topics: list[str]) -> dict[str, str]:
    """Each topic's max.message.bytes; retried while a just-created topic is unknown to the broker."""
    client = admin(s.kafka_bootstrap)
    deadline = time.monotonic() + 15
    while True:
        try:
            described = client.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics])
            return {r.name: f.result()["max.message.bytes"].value for r, f in described.items()}
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _huge_delete(s: Settings, target: int) -> tuple[bytes, bytes]:
    """A DeleteObject keyed by its (huge) object id, with a huge principal, whose key + value is ``target`` bytes."""
    oid = "o" * 300_000
    principal_len = target - 2 * 300_000
    while True:
        cmd = DeleteObject("huge-delete", oid, "p" * principal_len, AT)
        size = len(oid) + len(codec.encode_command(cmd))
        if size == target:
            return oid.encode(), codec.encode_command(cmd)
        principal_len += target - size


def test_records_at_the_limits_are_decided_and_always_fit(spark, backend: Settings) -> None:  # noqa: ANN001
    s = backend
    sizes = for_settings(s)
    m, bound, d = s.max_message_bytes, sizes.max_record_bytes, sizes.max_document_bytes
    topics = [s.topic_commands, s.topic_events, s.topic_rejections]
    assert set(_max_message_bytes(s, topics).values()) == {str(m)}

    # Through the API's own producer configuration: the largest document (ids at their bound) and one byte more.
    oid_a, oid_b, who = utf8_id(256, "objA"), utf8_id(256, "objB"), utf8_id(256, "who")
    at_limit = CreateObject(utf8_id(256, "cmdA"), oid_a, who, AT, document=utf8_object(d))
    follow = UpdateObject("u-a", oid_a, who, AT, expected_version=1, patch='{"b": 1}')
    over = CreateObject(utf8_id(256, "cmdB"), oid_b, who, AT, document=utf8_object(d + 1))
    retry_small = CreateObject("c-b", oid_b, who, AT, document="{}")
    api = [(c.object_id.encode(), codec.encode_command(c), None) for c in (at_limit, follow, over, retry_small)]
    signer = signer_for(s)
    _send(producer_config(s), s.topic_commands, api, signer)

    # Straight onto the topic, up to what the broker takes (a one-record batch of max.message.bytes).
    raw_conf = {"bootstrap.servers": s.kafka_bootstrap, "message.max.bytes": m + 4096, "acks": "all"}
    garbage_key = b"garbage"
    garbage = b"\xff" + bytes(range(256)) * ((m - 72 - len(garbage_key) - 1) // 256)
    big_key = b"\xfe" * ((m - 80) // 2)
    delete_key, delete_value = _huge_delete(s, m - 100 - SIGNATURE_HEADER_BYTES)  # signed: room for the header
    delete_cmd = codec.decode_command(delete_value)
    assert record_size(outcome_record(decide(None, delete_cmd, limits_for(s)).outcome, s, 0)) > bound  # would not fit
    principal_heavy = CreateObject("c-p", "obj-p", "p" * 500_000, AT, document=utf8_object(400_000))
    raw = [
        (garbage_key, garbage, partition_for(garbage_key, s.partitions)),
        (big_key, b"\xfd" * ((m - 80) // 2), partition_for(big_key, s.partitions)),
        (delete_key, delete_value, partition_for(delete_key, s.partitions)),
        (b"obj-p", codec.encode_command(principal_heavy), partition_for(b"obj-p", s.partitions)),
    ]
    # garbage and big_key at the broker's very limit, unsigned (no room for a header; they fail to decode first)
    _send(raw_conf, s.topic_commands, raw[:2])
    _send(raw_conf, s.topic_commands, raw[2:], signer)

    drain(spark, s, timeout=240)  # raises if the query failed or did not finish

    inputs = read_all(s, s.topic_commands)
    assert len(inputs) == len(api) + len(raw)
    got = topic_outputs(s)
    assert len(got) == len(inputs)  # every record decided, exactly once
    assert all(record_size(r) <= bound for r in got)  # type: ignore[arg-type]

    # Byte for byte what the shared fold computes from the same records (both backends, deterministic).
    by_key: dict[bytes | None, list[InputRecord]] = defaultdict(list)
    for r in inputs:
        by_key[r.key].append(InputRecord(r.key, r.value, r.topic, r.partition, r.offset,
                                         next((v for k, v in r.headers if k == SIGNATURE_HEADER), None)))
    parked: list[OutputRecord] = []
    want = [o for recs in by_key.values() for o in fold(lambda: None, recs, s, parked=parked)[0]]
    assert Counter(got) == Counter(want)
    # The records that did not decode, up to the broker's limit, are parked whole (the parked topic takes M + 1 KiB).
    on_topic = [(r.topic, r.key, r.value, r.partition, r.headers) for r in read_all(s, s.parked_topic)]
    assert len(parked) == 2 and Counter(on_topic) == Counter(parked), (len(parked), len(on_topic))

    outcomes = [codec.decode_outcome(v) for _, _, v, _, _ in got]  # type: ignore[arg-type]
    events = {(e.command_id, e.version): e for e in outcomes if isinstance(e, Event)}
    assert events[(at_limit.command_id, 1)].document == at_limit.document
    assert (follow.command_id, 2) in events and (retry_small.command_id, 1) in events
    event_a = next(v for t, _, v, _, _ in got if t == s.topic_events and codec.decode_event(v).version == 1
                   and codec.decode_event(v).command_id == at_limit.command_id)
    assert len(event_a) + warnings_bytes() > bound - 1024  # it really is at the limit (with no warnings to carry)

    rejections = [o for o in outcomes if isinstance(o, Rejection)]
    by_cid = {r.command_id: r for r in rejections if r.command_id is not None}
    assert by_cid[over.command_id].reason is ReasonCode.TOO_LARGE and by_cid[over.command_id].original is None
    assert by_cid["c-p"].reason is ReasonCode.MALFORMED  # the huge principal; it fits, so it is the domain's answer
    assert by_cid["huge-delete"].reason is ReasonCode.TOO_LARGE  # the domain's MALFORMED would not have fit
    assert by_cid["huge-delete"].original is not None and by_cid["huge-delete"].original.value_length == len(delete_value)
    undecodable = {r.original.key_length: r for r in rejections if r.command_id is None and r.original is not None}
    assert undecodable[len(garbage_key)].reason is ReasonCode.MALFORMED
    assert undecodable[len(garbage_key)].original.value_length == len(garbage)
    assert len(undecodable[len(garbage_key)].original.value) == sizes.keep_bytes
    assert undecodable[len(big_key)].reason is ReasonCode.MALFORMED


def test_existing_topics_get_the_configured_max_message_bytes(settings: Settings) -> None:
    tag = uuid.uuid4().hex[:8]
    small, large = f"small-{tag}", f"large-{tag}"
    client = admin(settings.kafka_bootstrap)
    new = [NewTopic(small, 1, 1, config={"max.message.bytes": "500000"}),
           NewTopic(large, 1, 1, config={"max.message.bytes": str(4 * 1024 * 1024)})]
    for f in client.create_topics(new).values():
        f.result()
    assert ensure_topics(settings, [small, large], partitions=1) == []
    want = str(settings.max_message_bytes)
    assert _max_message_bytes(settings, [small, large]) == {small: want, large: want}
