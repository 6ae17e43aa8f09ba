"""The AsyncAPI 3.0 document of Arbiter's topics, built from the same schema catalog the codecs use.

Three channels (commands, events, rejections) with their Kafka bindings, keys (the object id), partitioning
(murmur2 of the key, as Java clients), Avro payloads in the Confluent wire format with every released schema
id, the CloudEvents headers of events and rejections (``app.validator.headers``) and the rejection reason codes.
"""

from __future__ import annotations

from typing import Any

from app.contract.subjects import COMPATIBILITY, subject_versions, topic_records
from app.settings import Settings
from app.traces import TRACEPARENT, TRACEPARENT_PATTERN, TRACESTATE, TRACESTATE_BYTES
from app.validator.headers import CONTENT_TYPE, EVENT_TYPES, REJECTED_TYPE, RULES_VERSION, SOURCE_PREFIX
from commands import ReasonCode
from schemas.catalog import COMMAND, EVENT, REJECTION

AVRO_FORMAT = "application/vnd.apache.avro;version=1.9.0"
KAFKA_BINDING = "0.5.0"
PARTITIONING = ("toPositive(murmur2(key)) % partitions — the Java client's default partitioner; every command, "
                "event and rejection of one object is on the same partition number of its topic")

_NAMES = {COMMAND: "Command", EVENT: "Event", REJECTION: "Rejection"}
_CHANNELS = {COMMAND: "commands", EVENT: "events", REJECTION: "rejections"}
_DOCS = {
    COMMAND: "A request to change one object, written by the API; the validator decides it.",
    EVENT: "An accepted change; event_id is uuid5(object_id:version), so a replay writes the same id.",
    REJECTION: "Why a command (or an unusable record) was refused, with a reason code.",
}


def _headers(record: str, settings: Settings) -> dict[str, Any] | None:
    if record == COMMAND:
        return None
    types = list(EVENT_TYPES.values()) if record == EVENT else [REJECTED_TYPE]
    string: dict[str, Any] = {"type": "string"}
    return {
        "type": "object",
        "description": "CloudEvents 1.0, Kafka protocol binding, binary content mode; derived only from the "
                       "decision, so a replayed batch writes the same headers. Then the command's W3C trace "
                       "context, copied from its record when the API traced its write.",
        "required": ["ce_specversion", "ce_id", "ce_type", "ce_source", "content-type"]
                    + (["ce_subject", "ce_time"] if record == EVENT else []),
        "properties": {
            "ce_specversion": {"type": "string", "const": "1.0"},
            "ce_id": {**string, "description": "the event_id or rejection_id (uuid5)"},
            "ce_type": {"type": "string", "enum": types},
            "ce_source": {"type": "string", "const": SOURCE_PREFIX + settings.topic_commands,
                          "description": "the commands topic the decision came from"},
            "ce_subject": {**string, "description": "the object id (absent on the rejection of a record that "
                                                    "never decoded into a command)"},
            "ce_time": {**string, "format": "date-time", "description": "the command's issued_at, RFC 3339 UTC "
                                                                        "(absent where ce_subject is)"},
            RULES_VERSION: {**string, "pattern": "^[1-9][0-9]*$",
                            "description": "CloudEvents extension: the team's rules version the decision was made "
                                           "under, decimal (absent when no rules were in force)"},
            "content-type": {"type": "string", "const": CONTENT_TYPE.decode()},
            TRACEPARENT: {**string, "pattern": TRACEPARENT_PATTERN,
                          "description": "W3C Trace Context of the command's write (version 00), when it had one"},
            TRACESTATE: {**string, "maxLength": TRACESTATE_BYTES,
                         "description": "its tracestate: whole list members, at most 512 bytes; only beside a "
                                        "traceparent"},
        },
    }


def _message(record: str, settings: Settings, registry_url: str | None) -> dict[str, Any]:
    versions = subject_versions(settings)[record]
    latest = versions[-1]
    message: dict[str, Any] = {
        "name": _NAMES[record],
        "title": record,
        "summary": _DOCS[record],
        "contentType": "application/vnd.apache.avro+binary",
        "payload": {"schemaFormat": AVRO_FORMAT, "schema": latest.schema},
        "bindings": {"kafka": {
            "key": {"type": "string", "description": "the object id, UTF-8 (a rejection of an unusable record "
                                                     "keeps the record's own key)"},
            "schemaIdLocation": "payload",
            "schemaIdPayloadEncoding": "confluent",
            "schemaLookupStrategy": "TopicIdStrategy",
            "bindingVersion": KAFKA_BINDING,
        }},
        "x-schema-ids": [{"version": v.version, "id": v.schema_id} for v in versions],
        "x-subjects": [record, f"{_topic(record, settings)}-value"],
        "x-compatibility": COMPATIBILITY,
    }
    headers = _headers(record, settings)
    if headers is not None:
        message["headers"] = headers
    if record == REJECTION:
        message["x-reason-codes"] = [c.value for c in ReasonCode]
    if registry_url:
        message["x-registry-url"] = registry_url
    return message


def _topic(record: str, settings: Settings) -> str:
    return {r: t for t, r in topic_records(settings).items()}[record]


def document(settings: Settings, registry_url: str | None = None) -> dict[str, Any]:
    """Return the AsyncAPI 3.0.0 document of ``settings``' topics; ``registry_url`` serves their schemas by id."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for record in (COMMAND, EVENT, REJECTION):
        name, topic = _CHANNELS[record], _topic(record, settings)
        messages[_NAMES[record]] = _message(record, settings, registry_url)
        channels[name] = {
            "address": topic,
            "title": topic,
            "description": f"Key: the object id. Partitioning: {PARTITIONING}.",
            "messages": {_NAMES[record]: {"$ref": f"#/components/messages/{_NAMES[record]}"}},
            "bindings": {"kafka": {"topic": topic, "partitions": settings.partitions,
                                   "bindingVersion": KAFKA_BINDING}},
            "x-partitioning": {"key": "object id (UTF-8)", "hash": "murmur2", "partitions": settings.partitions,
                               "formula": "(murmur2(key) & 0x7fffffff) % partitions"},
        }
        action = "send" if record == COMMAND else "receive"
        operations[f"{action}{_NAMES[record]}"] = {
            "action": action, "channel": {"$ref": f"#/channels/{name}"},
            "messages": [{"$ref": f"#/channels/{name}/messages/{_NAMES[record]}"}],
            "summary": "Write commands (the API does)" if record == COMMAND else f"Consume {topic}",
        }
    servers: dict[str, Any] = {"kafka": {"host": settings.kafka_bootstrap.split(",")[0], "protocol": "kafka",
                                         "description": "the Kafka cluster (bootstrap servers)"}}
    if registry_url:
        servers["kafka"]["bindings"] = {"kafka": {"schemaRegistryUrl": registry_url,
                                                  "schemaRegistryVendor": "confluent", "bindingVersion": KAFKA_BINDING}}
    return {
        "asyncapi": "3.0.0",
        "info": {"title": "Arbiter topics", "version": "1",
                 "description": "Commands in; events and rejections out, decided per object in partition order."},
        "defaultContentType": "application/vnd.apache.avro+binary",
        "servers": servers,
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }
