"""Every size limit of Arbiter's Kafka records, derived from one setting: ``ARBITER_MAX_MESSAGE_BYTES``.

``M = max_message_bytes`` is each topic's ``max.message.bytes`` (the largest record *batch* the broker takes)
and the validator sink's ``max.request.size`` (the Java producer refuses a record whose one-record batch
could exceed it). From ``M``:

- ``max_record_bytes`` = M − ``FRAME_BYTES`` − ``HEADERS_BYTES`` − ``MARGIN_BYTES``: the most key + value bytes of any record
  Arbiter writes. ``FRAME_BYTES`` is the Java producer's own upper bound on a one-record batch's framing
  (``AbstractRecords.estimateSizeInBytesUpperBound``: the 61-byte v2 batch header, a record header of at most
  21 bytes, key and value length varints of at most 5 bytes each, a 1-byte header count); ``MARGIN_BYTES``
  is slack on top, so a framing difference between clients never decides whether a record fits.
  ``HEADERS_BYTES`` holds the headers the validator writes on every output (its CloudEvents attributes,
  ``app.validator.headers``, whose worst case a test checks against it) and room for a trace context.
  The API producer's librdkafka ``message.max.bytes`` refuses a command over this figure too, so a command
  the API stores always fits its topic. A command's one header, the record's signature (``app.signing``, at most
  ``SIGNATURE_HEADER_BYTES``), and its trace context when the API traces (``TRACE_HEADERS_BYTES``) are allowed on
  top and come out of the margin.
- ``max_document_bytes``: the largest document or patch ``commands.decide`` accepts, so that the event (and
  the command) of such a payload with every id at ``Limits.max_id_bytes`` fits ``max_record_bytes``. The
  overhead is the worst-case Avro size of the newest Event and Command schemas, walked field by field.
- ``keep_bytes``: how much of an unusable record's key and value its rejection keeps (at most
  ``commands.KEEP_BYTES``), so the rejection of *any* record on the commands topic fits.
- consumer fetch sizes: a partition fetch holds at least one whole batch of ``M``.

The validator's fold checks every output record against ``max_record_bytes`` and turns one that does not
fit into a ``TOO_LARGE`` rejection keeping ``FALLBACK_KEEP_BYTES`` of the command (``app.validator.outputs``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from app.settings import Settings
from app.traces import TRACESTATE_BYTES
from commands import DEFAULT_LIMITS, KEEP_BYTES
from commands.rules.bounds import (
    MAX_MESSAGE_BYTES,
    MAX_MODE_BYTES,
    MAX_NAME_BYTES,
    MAX_POINTER_BYTES,
    MAX_POINTERS,
    MAX_REASON_BYTES,
    MAX_RULE_BYTES,
    MAX_WARNINGS,
)
from schemas.catalog import COMMAND, EVENT, REJECTION
from schemas.codec import default_codec
from schemas.wire import HEADER_SIZE

BATCH_HEADER_BYTES = 61  # baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4,
#                          baseTimestamp 8, maxTimestamp 8, producerId 8, producerEpoch 2, baseSequence 4, count 4
RECORD_HEADER_BYTES = 21  # length varint 5, attributes 1, timestampDelta varlong 10, offsetDelta varint 5
FRAME_BYTES = BATCH_HEADER_BYTES + RECORD_HEADER_BYTES + 5 + 5 + 1  # + key and value length varints, header count
MARGIN_BYTES = 1024
HEADERS_BYTES = 2048  # an output's Kafka headers: CloudEvents attributes (< 800 bytes at worst) + a W3C trace context
# librdkafka's RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD: length 5, attributes 1, timestampDelta 10, offsetDelta 5,
# key length 5, value length 5, header count 5.
LIBRDKAFKA_RECORD_OVERHEAD = 36
# The arbiter-signature header as librdkafka counts it: name and value length varints (5 each), the 17-byte name,
# a key id of at most 64 characters (app.signing.MAX_KID_CHARS), ":" and 43 base64url characters.
SIGNATURE_HEADER_BYTES = 5 + 17 + 5 + 64 + 1 + 43
# A command's trace context (app.traces) as librdkafka counts it: traceparent (11-byte name, 55-byte value) and
# tracestate (10-byte name, at most TRACESTATE_BYTES), each with two length varints of at most 5 bytes.
TRACE_HEADERS_BYTES = (5 + 11 + 5 + 55) + (5 + 10 + 5 + TRACESTATE_BYTES)

UUID_BYTES = 36         # event_id, rejection_id: uuid5 text
TOPIC_BYTES = 249       # Kafka's longest topic name (ASCII)
SHA256_HEX_BYTES = 64
OUTCOME_BYTES = 16      # Rejection.original_outcome ("ACCEPTED")
MESSAGE_CHARS = 1000    # rejection messages built by the validator are clipped to this many characters
MESSAGE_BYTES = 4 * MESSAGE_CHARS + 3  # UTF-8, plus the ellipsis ``commands.rejection.clip`` appends
FALLBACK_KEEP_BYTES = 1024  # of the key and value of a command whose outcome did not fit
# What a parked record (schemas.parked: the command's key, value and signature, its coordinates and reason) may
# take beyond the commands record it copies: the envelope's fixed fields and a topic name, with slack. The parked
# topic's max.message.bytes and the sink's max.request.size are M + this, so a command that fit its topic fits it.
PARKED_MARGIN_BYTES = 1024
# What a command carries of its sender's token (issue 27); the API copies no more than this into a command.
# Not counted in ``max_document_bytes`` (that would cost every document ~2.4 KiB for the few callers with many groups):
# a command within ``identity_bytes()`` of the record limit, from such a caller, is refused 413 TOO_LARGE by the
# API's producer instead.
MAX_GROUPS = 32         # groups of the sender, sorted, the first 32
GROUP_NAME_BYTES = 64   # a longer group name is not copied (ASCII: principal characters)
ISSUER_BYTES = 256      # ARBITER_OIDC_ISSUER URLs and ARBITER_LOCAL_ISSUER_ID are refused longer
JTI_BYTES = 128         # a longer jti is replaced by its SHA-256 (64 hex characters)
PAYLOAD_FIELDS = frozenset({"document", "patch", "editor", "reader"})  # at most one is set per event or command
# Of the caller's own rejections about an object, what one page of GET /objects/{id}/events?include=rejections reads
# at most (the audit store's by-(principal, object) index, on the threadpool): a caller may pile up rejections on its
# own object at its write rate; past this the page says ``rejections_truncated`` (a smaller ``limit`` narrows it).
OWN_REJECTIONS_PER_PAGE = 1000

# Java clients' defaults, kept where they are already large enough.
JAVA_FETCH_MAX_BYTES = 50 * 1024 * 1024
JAVA_BUFFER_MEMORY = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SizeLimits:
    """The chain of limits for one ``max_message_bytes``; see the module docstring."""

    max_message_bytes: int
    max_record_bytes: int
    max_document_bytes: int
    keep_bytes: int
    max_id_bytes: int


class LimitsTooSmall(ValueError):
    """``max_message_bytes`` leaves no room for a document or for the rejection of an unusable record."""


def varint_size(n: int) -> int:
    """Return the bytes of Avro's zig-zag varint for ``n`` (Kafka's varints are the same)."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def avro_max_size(schema: Any, bounds: Mapping[str, int], exclusive: frozenset[str] = frozenset(),  # noqa: ANN401
                  field: str = "") -> int:
    """Return the most bytes a datum of ``schema`` encodes to, with string/bytes fields bounded by ``bounds``.

    ``bounds`` maps field names to their longest UTF-8 or byte length; a string or bytes field without a bound
    raises ``KeyError`` (a new schema field must be given one). Of a record's fields named in ``exclusive``,
    at most one is non-null.
    """
    if isinstance(schema, list):  # union: branch index, then the largest branch
        return varint_size(len(schema) - 1) + max(avro_max_size(s, bounds, exclusive, field) for s in schema)
    kind = schema["type"] if isinstance(schema, dict) else schema
    if isinstance(kind, dict | list):
        return avro_max_size(kind, bounds, exclusive, field)
    if kind == "null":
        return 0
    if kind == "boolean":
        return 1
    if kind == "int":
        return 5
    if kind == "long":
        return 10
    if kind in ("float", "double"):
        return 4 if kind == "float" else 8
    if kind in ("string", "bytes"):
        bound = bounds[field]
        return varint_size(bound) + bound
    if kind == "array":  # blocks: one count varint, the items, then a zero count
        count = bounds[f"{field}#count"]
        return varint_size(count) + count * avro_max_size(schema["items"], bounds, exclusive, field) + 1
    if kind == "enum":
        return varint_size(len(schema["symbols"]) - 1)
    if kind == "fixed":
        return int(schema["size"])
    if kind == "record":
        total, widest, nulls = 0, 0, 0
        for f in schema["fields"]:
            size = avro_max_size(f["type"], bounds, exclusive, f["name"])
            if f["name"] in exclusive:
                null = varint_size(len(f["type"]) - 1) if isinstance(f["type"], list) else 0
                nulls += null
                widest = max(widest, size - null)
            else:
                total += size
        return total + nulls + widest
    raise ValueError(f"cannot bound the size of Avro type {kind!r} (field {field!r})")


def headers_size(headers: Iterable[tuple[str, bytes]]) -> int:
    """Return the bytes ``headers`` take in a Kafka record: per header, key and value with their length varints."""
    total = 0
    for k, v in headers:
        key = k.encode("utf-8")
        total += varint_size(len(key)) + len(key) + varint_size(len(v)) + len(v)
    return total


def _schema(subject: str) -> Any:  # noqa: ANN401
    return default_codec.catalog.latest(subject).schema


def event_record_size(payload_bytes: int, id_bytes: int, warnings: int = MAX_WARNINGS) -> int:
    """Return the most key + value bytes of an event with a payload of ``payload_bytes``, ids of ``id_bytes`` and
    ``warnings`` warnings of rules in warn or audit mode (each at its bounds; room for ``MAX_WARNINGS`` is kept)."""
    bounds = {"event_id": UUID_BYTES, "object_id": id_bytes, "command_id": id_bytes, "principal": id_bytes,
              "owner": id_bytes, "editor": id_bytes, "reader": id_bytes,
              "document": payload_bytes, "patch": payload_bytes, "issuer": ISSUER_BYTES, "jti": JTI_BYTES,
              "object_type": MAX_NAME_BYTES, "warnings#count": warnings, "rule": MAX_RULE_BYTES,
              "mode": MAX_MODE_BYTES, "reason": MAX_REASON_BYTES, "message": MAX_MESSAGE_BYTES,
              "pointers#count": MAX_POINTERS, "pointers": MAX_POINTER_BYTES}
    return id_bytes + HEADER_SIZE + avro_max_size(_schema(EVENT), bounds, PAYLOAD_FIELDS)


def command_record_size(payload_bytes: int, id_bytes: int, *, identity: bool = False) -> int:
    """Return the most key + value bytes of a command with a payload of ``payload_bytes`` and ids of ``id_bytes``;
    with ``identity``, its sender's groups, issuer and jti at their bounds too (else none of them)."""
    bounds = {"object_id": id_bytes, "command_id": id_bytes, "principal": id_bytes, "editor": id_bytes,
              "reader": id_bytes, "document": payload_bytes, "patch": payload_bytes,
              "groups#count": MAX_GROUPS if identity else 0, "groups": GROUP_NAME_BYTES,
              "issuer": ISSUER_BYTES if identity else 0, "jti": JTI_BYTES if identity else 0,
              "object_type": MAX_NAME_BYTES}
    return id_bytes + HEADER_SIZE + avro_max_size(_schema(COMMAND), bounds, PAYLOAD_FIELDS)


def warnings_bytes() -> int:
    """Return the most bytes the warnings of rules in warn or audit mode add to an event (the room every event
    keeps for them, so an accepted command's event fits whatever the watching rules say)."""
    return event_record_size(0, 0) - event_record_size(0, 0, warnings=0)


def identity_bytes() -> int:
    """Return the most bytes the sender's groups, issuer and jti add to a command (~2.4 KiB)."""
    return command_record_size(0, 0, identity=True) - command_record_size(0, 0)


def rejection_record_size(keep: int, id_bytes: int) -> int:
    """Return the most key + value bytes of a rejection the validator builds, keeping ``keep`` bytes of a record.

    Its ids are at most ``id_bytes`` (clipped if longer), its message at most ``MESSAGE_CHARS`` characters,
    and its Kafka key is the object id or the kept key.
    """
    bounds = {"rejection_id": UUID_BYTES, "message": MESSAGE_BYTES, "command_id": id_bytes, "object_id": id_bytes,
              "principal": id_bytes, "original_outcome": OUTCOME_BYTES, "topic": TOPIC_BYTES, "key": keep,
              "value": keep, "key_sha256": SHA256_HEX_BYTES, "value_sha256": SHA256_HEX_BYTES,
              "issuer": ISSUER_BYTES, "jti": JTI_BYTES, "rule": MAX_RULE_BYTES, "rule_message": MAX_MESSAGE_BYTES,
              "rule_pointers#count": MAX_POINTERS, "rule_pointers": MAX_POINTER_BYTES}
    return max(id_bytes, keep) + HEADER_SIZE + avro_max_size(_schema(REJECTION), bounds)


def _largest(size_of: Any, bound: int, start: int) -> int:  # noqa: ANN401
    """Return the largest n in [0, ``start``] with ``size_of(n) <= bound`` (``size_of`` rising), or -1 if none."""
    lo, hi = -1, start
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size_of(mid) <= bound:
            lo = mid
        else:
            hi = mid - 1
    return lo


@lru_cache(maxsize=16)
def size_limits(max_message_bytes: int, max_id_bytes: int = DEFAULT_LIMITS.max_id_bytes) -> SizeLimits:
    """Return the limits derived from a topic's ``max.message.bytes``; raise ``LimitsTooSmall`` if it leaves no room."""
    record = max_message_bytes - FRAME_BYTES - HEADERS_BYTES - MARGIN_BYTES
    document = _largest(lambda d: max(event_record_size(d, max_id_bytes), command_record_size(d, max_id_bytes)),
                        record, record)
    keep = _largest(lambda k: rejection_record_size(k, max_id_bytes), record, min(KEEP_BYTES, record // 3))
    if document < 1 or keep < FALLBACK_KEEP_BYTES or rejection_record_size(FALLBACK_KEEP_BYTES, max_id_bytes) > record:
        raise LimitsTooSmall(f"max_message_bytes={max_message_bytes} leaves {document} bytes for a document and "
                             f"{keep} for a rejection's kept bytes; raise ARBITER_MAX_MESSAGE_BYTES")
    return SizeLimits(max_message_bytes, record, document, keep, max_id_bytes)


def for_settings(settings: Settings) -> SizeLimits:
    """Return the size limits of ``settings.max_message_bytes``."""
    return size_limits(settings.max_message_bytes)


def topic_max_message_bytes(settings: Settings, topic: str) -> int:
    """Return ``max.message.bytes`` of ``topic``: M, or M + ``PARKED_MARGIN_BYTES`` for the parked topic."""
    m = settings.max_message_bytes
    return m + PARKED_MARGIN_BYTES if topic == settings.parked_topic else m


def topic_config(settings: Settings, topic: str = "") -> dict[str, str]:
    """Return the topic-level size setting Arbiter's topic ``topic`` is created (or altered) with."""
    return {"max.message.bytes": str(topic_max_message_bytes(settings, topic))}


def api_producer_config(settings: Settings, *, traced: bool = False) -> dict[str, Any]:
    """Return the API producer's librdkafka size option: it refuses a command over ``max_record_bytes`` (key + value).

    librdkafka compares a record's largest wire size, key + value + headers + ``LIBRDKAFKA_RECORD_OVERHEAD``, with
    ``message.max.bytes`` (``rd_kafka_msg_max_wire_size``); the headers are the signature and, when the API
    traces (``traced``), the trace context.
    """
    return {"message.max.bytes": for_settings(settings).max_record_bytes + LIBRDKAFKA_RECORD_OVERHEAD
            + SIGNATURE_HEADER_BYTES + (TRACE_HEADERS_BYTES if traced else 0)}


def sink_options(settings: Settings) -> dict[str, str]:
    """Return the Spark Kafka sink's (Java producer's) size options."""
    m = settings.max_message_bytes + PARKED_MARGIN_BYTES  # a parked record may be this large (schemas.parked)
    return {"kafka.max.request.size": str(m), "kafka.buffer.memory": str(max(JAVA_BUFFER_MEMORY, 2 * m))}


def source_options(settings: Settings) -> dict[str, str]:
    """Return the Spark Kafka source's (Java consumer's) fetch sizes: one partition fetch holds a whole batch."""
    m = settings.max_message_bytes
    return {"kafka.max.partition.fetch.bytes": str(m), "kafka.fetch.max.bytes": str(max(JAVA_FETCH_MAX_BYTES, m))}


def consumer_config(settings: Settings) -> dict[str, str]:
    """Return librdkafka consumers' fetch sizes (projections): one partition fetch holds a whole batch."""
    m = settings.max_message_bytes
    return {"fetch.message.max.bytes": str(m), "fetch.max.bytes": str(max(JAVA_FETCH_MAX_BYTES, m))}


def clip_utf8(text: str, max_bytes: int) -> str:
    """Return ``text`` if its UTF-8 is at most ``max_bytes``, else its longest prefix that fits with an ellipsis."""
    if len(text) * 4 <= max_bytes:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes - 3].decode("utf-8", "ignore") + "…"
