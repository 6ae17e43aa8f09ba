"""Arbiter's topics for consumers that know nothing of Arbiter: a stock Avro deserializer with only a registry URL.

The embedded default serves a read-only Confluent-compatible registry from the schema catalog (``/registry`` on
the API); confluent-kafka's own ``SchemaRegistryClient`` and ``AvroDeserializer`` decode every record the
validator wrote on events and rejections, and records an older Arbiter wrote with the v1 schemas.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import fastavro
import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastapi import FastAPI

from app.api.main import create_app
from app.api.routes import registry as registry_routes
from app.contract.registry import RegistryRegistration, SchemaIdsDisagree, client, ensure_registered
from app.settings import Settings
from app.validator.job import drain
from app.validator.topic_io import produce, read_all
from commands import (
    CreateObject,
    DeleteObject,
    Event,
    EventType,
    GrantEditor,
    GrantReader,
    OriginalRecord,
    ReasonCode,
    Rejection,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    reject_record,
)
from schemas import codec, records
from schemas.catalog import EVENT, REJECTION, SchemaCatalog, SchemaVersion
from schemas.wire import header
from tests.docs_snippets import snippet
from tests.integration.test_api_support import served
from tests.integration.validator_oracle import send_commands
from tests.unit.test_contract_asyncapi import validator

pytestmark = pytest.mark.integration

T0 = datetime(2025, 6, 1, tzinfo=UTC)


def _at(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def _v1(subject: str, record: dict[str, object]) -> bytes:
    """Encode ``record`` as an older Arbiter did: the subject's version 1 schema and its id."""
    v1 = next(v for v in codec.default_codec.catalog.versions() if v.subject == subject and v.version == 1)
    buf = io.BytesIO()
    buf.write(header(v1.schema_id))
    fastavro.schemaless_writer(buf, v1.parsed, record)
    return buf.getvalue()


def _docs_consumer(registry_url: str, s: Settings) -> str:
    """Run the docs' Python consumer as printed (docs/consuming.md), pointed at ``s``' broker, registry and topics by
    the ``ARBITER_*`` variables it reads; return what it printed."""
    env = {**os.environ, "ARBITER_SCHEMA_REGISTRY_URL": registry_url, "ARBITER_KAFKA_BOOTSTRAP": s.kafka_bootstrap,
           "ARBITER_TOPIC_EVENTS": s.topic_events, "ARBITER_TOPIC_REJECTIONS": s.topic_rejections}
    done = subprocess.run([sys.executable, "-c", snippet("consumer.py")], capture_output=True, text=True, timeout=120,
                          check=True, env=env)
    return done.stdout


def test_a_stock_avro_deserializer_decodes_every_record_with_only_the_registry_url(spark, settings: Settings) -> None:  # noqa: ANN001
    s = settings.model_copy(update={"state_backend": "rocksdb"})
    o = "reg-obj"
    send_commands(s, [
        UpdateObject("u0", o, "alice", _at(0), patch="{}"),  # NOT_FOUND
        CreateObject("c", o, "alice", _at(1), document='{"a": 1}'),
        UpdateObject("u1", o, "alice", _at(2), patch='{"b": 2}'),
        GrantEditor("ge", o, "alice", _at(3), editor="bob"),
        RevokeEditor("re", o, "alice", _at(4), editor="bob"),
        GrantReader("gr", o, "alice", _at(5), reader="carol"),
        RevokeReader("rr", o, "alice", _at(6), reader="carol"),
        UpdateObject("u2", o, "alice", _at(7), expected_version=1, patch="{}"),  # VERSION_CONFLICT
        DeleteObject("d", o, "alice", _at(8)),
    ])
    produce(s, [(o.encode(), b"\x07not the wire format")])  # MALFORMED: a rejection keeping the bytes
    # Written before a schema change: an event and a rejection in their v1 schemas (ids 1101, 1201).
    old_event = Event("old-ev", EventType.CREATED, "old", 1, "old-c", "dave", _at(9), "dave", document="{}")
    old_rejection = reject_record(OriginalRecord("commands", 0, 7, b"k", b"v"), ReasonCode.MALFORMED, "old")
    produce(s, [(b"old", _v1(EVENT, records.event_to_record(old_event)))], topic=s.topic_events)
    produce(s, [(b"k", _v1(REJECTION, records.rejection_to_record(old_rejection)))], topic=s.topic_rejections)
    drain(spark, s, timeout=180)

    with served(create_app(s)) as url:
        registry = SchemaRegistryClient({"url": f"{url}/registry"})  # all a stranger needs
        deserialize = AvroDeserializer(registry)
        seen: dict[int, int] = {}
        for topic in (s.topic_events, s.topic_rejections):
            for r in read_all(s, topic):
                assert r.value is not None
                got = deserialize(r.value, SerializationContext(topic, MessageField.VALUE))
                ours = codec.decode_outcome(r.value)
                schema_id = codec.schema_id_of(r.value)
                seen[schema_id] = seen.get(schema_id, 0) + 1
                if isinstance(ours, Event):
                    assert (got["event_id"], got["type"], got["object_id"], got["version"]) == (
                        ours.event_id, ours.type.value, ours.object_id, ours.version)
                    assert got["occurred_at"] == ours.occurred_at
                else:
                    assert isinstance(ours, Rejection)
                    assert (got["rejection_id"], got["reason"], got["message"]) == (
                        ours.rejection_id, ours.reason.value, ours.message)
        # the first and the newest version of both (a rejection is written as v5 only for v5's reasons: issue 53)
        assert seen == {1101: 1, 1105: 7, 1201: 1, 1204: 3}, seen

        # The setup a configured registry goes through agrees with the embedded one: same ids, nothing to add.
        ids = ensure_registered(s, registry)
        assert ids[f"{s.topic_events}-value:2"] == ids["arbiter.Event:2"] == 1102
        assert ids[f"{s.topic_events}-value:3"] == ids["arbiter.Event:3"] == 1103
        assert ids[f"{s.topic_events}-value:4"] == ids["arbiter.Event:4"] == 1104  # issue 36: object_type, rules_version
        assert ids[f"{s.topic_events}-value:5"] == ids["arbiter.Event:5"] == 1105  # issue 52: warnings
        assert ids[f"{s.topic_rejections}-value:1"] == 1201
        assert ids[f"{s.topic_rejections}-value:5"] == ids["arbiter.Rejection:5"] == 1205  # issue 53: UNIQUE_VIOLATION
        assert registry.get_compatibility(f"{s.topic_events}-value") == "BACKWARD_TRANSITIVE"
        assert registry.get_latest_version(f"{s.topic_commands}-value").schema_id == 1004

        # The docs' consumer, as printed, prints one line per record.
        lines = _docs_consumer(f"{url}/registry", s).splitlines()
        assert len(lines) == sum(seen.values())
        assert {line.split(" ", 1)[0] for line in lines} == {
            "",  # the two records written before headers existed: no ce_type
            "arbiter.command.rejected", "arbiter.object.created", "arbiter.object.updated", "arbiter.object.deleted",
            "arbiter.object.editor_granted", "arbiter.object.editor_revoked", "arbiter.object.reader_granted",
            "arbiter.object.reader_revoked"}

        doc = httpx.get(f"{url}/asyncapi.json").json()  # the same API serves the topics' AsyncAPI document
        assert validator().is_valid(doc)
        # from ARBITER_PUBLIC_URL (unset: the API's configured address), never from the request's Host
        assert doc["servers"]["kafka"]["bindings"]["kafka"]["schemaRegistryUrl"] == f"{s.public_base_url}/registry"


def test_a_registry_with_other_ids_is_refused_and_an_unreachable_one_is_retried(settings: Settings) -> None:
    repo = SchemaCatalog.repository()
    other = FastAPI()
    other.state.settings = settings
    other.state.schema_catalog = SchemaCatalog(  # the same schemas under the ids a fresh registry would give
        SchemaVersion(v.subject, v.version, i, v.schema) for i, v in enumerate(repo.versions(), 1))
    other.include_router(registry_routes.router)
    with served(other) as url:
        s = settings.model_copy(update={"schema_registry_url": f"{url}/registry"})
        with pytest.raises(SchemaIdsDisagree, match="arbiter.Command v1 .* as id 1, but Arbiter writes it with id 1001"):
            RegistryRegistration(s).start()
        with pytest.raises(SchemaIdsDisagree):
            ensure_registered(s, client(f"{url}/registry"))

    down = settings.model_copy(update={"schema_registry_url": "http://127.0.0.1:9/registry"})  # nothing listens
    registration = RegistryRegistration(down, retry_s=0.05).start()  # does not raise: the validator would go on
    deadline = time.monotonic() + 60
    while registration.attempts < 3:  # retried in the background
        assert time.monotonic() < deadline, registration.last_error
        time.sleep(0.05)
    assert not registration.done.is_set() and "127.0.0.1:9" in (registration.last_error or "")
    registration.done.set()  # stops the retries
