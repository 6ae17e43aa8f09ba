"""The AsyncAPI document is valid AsyncAPI 3.0.0 and says what the codecs and the validator do."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import jsonschema_rs
import pytest

from app.contract.asyncapi import document
from app.settings import Settings
from app.traces import trace_headers
from app.validator.headers import ce_headers
from app.validator.murmur2 import murmur2, partition_for
from app.validator.outputs import outcome_record
from commands import CreateObject, ReasonCode, decide
from schemas.catalog import COMMAND, EVENT, REJECTION
from schemas.codec import default_codec

pytestmark = pytest.mark.unit

SPEC = Path(__file__).resolve().parents[1] / "contract" / "asyncapi-3.0.0.json.gz"
S = Settings(topic_commands="cmd", topic_events="ev", topic_rejections="rj", partitions=12)


def validator() -> jsonschema_rs.Draft7Validator:
    return jsonschema_rs.Draft7Validator(json.loads(gzip.decompress(SPEC.read_bytes())))


def test_the_document_validates_against_the_asyncapi_3_schema() -> None:
    doc = document(S, "http://api:8000/registry")
    errors = [f"{e.instance_path}: {e.message}" for e in validator().iter_errors(doc)]
    assert errors == []
    assert not validator().is_valid({**doc, "channels": {"x": {"address": 1}}})  # the schema does check


def test_the_document_is_built_from_the_catalog_the_codecs_use() -> None:
    doc = document(S, "http://api:8000/registry")
    assert [c["address"] for c in doc["channels"].values()] == ["cmd", "ev", "rj"]
    assert all(c["bindings"]["kafka"]["partitions"] == 12 for c in doc["channels"].values())
    messages = doc["components"]["messages"]
    for name, record in (("Command", COMMAND), ("Event", EVENT), ("Rejection", REJECTION)):
        latest = default_codec.catalog.latest(record)
        assert messages[name]["payload"]["schema"] == latest.schema
        assert messages[name]["x-schema-ids"][-1] == {"version": latest.version, "id": latest.schema_id}
    assert messages["Rejection"]["x-reason-codes"] == [c.value for c in ReasonCode]
    assert messages["Event"]["x-subjects"] == ["arbiter.Event", "ev-value"]
    assert doc["servers"]["kafka"]["bindings"]["kafka"]["schemaRegistryUrl"] == "http://api:8000/registry"


def test_the_documented_headers_and_partitioning_are_what_the_validator_writes() -> None:
    doc = document(S)
    headers = doc["components"]["messages"]["Event"]["headers"]
    ev = decide(None, CreateObject("c", "o", "alice", datetime(2025, 1, 1, tzinfo=UTC), document="{}")).outcome
    trace = trace_headers(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", b"k=" + b"v" * 510)
    written = dict(outcome_record(ev, S, 0, trace)[4])
    assert set(headers["required"]) <= set(written) <= set(headers["properties"])
    assert set(written) - set(dict(ce_headers(ev, S.topic_commands))) == {"traceparent", "tracestate"}
    for name, value in written.items():
        prop = headers["properties"][name]
        assert prop.get("const", value.decode()) == value.decode()
        assert value.decode() in prop.get("enum", [value.decode()])
        assert re.fullmatch(prop.get("pattern", ".*"), value.decode()) and len(value) <= prop.get("maxLength", len(value))
    json.dumps(doc)  # served as JSON: nothing in it is bytes
    formula = doc["channels"]["events"]["x-partitioning"]["formula"]
    assert formula == "(murmur2(key) & 0x7fffffff) % partitions"
    assert partition_for(b"o", 12) == (murmur2(b"o") & 0x7FFFFFFF) % 12
