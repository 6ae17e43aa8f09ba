"""Hand-compiled Avro codecs for the hot schemas (command, event, rejection and state): several times faster than fastavro.

Each codec is tied to one committed schema file and serves only while that file is the subject's newest
version and the data's writer schema; the ``Codec`` checks this and uses fastavro for everything else
(older or registry-fetched writers, schema resolution). The tests hold them byte-identical to fastavro.
Decoders read from ``HEADER_SIZE`` to the end and raise ``ValueError``/``IndexError`` on invalid bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    EventType,
    GrantEditor,
    GrantReader,
    ObjectState,
    OriginalRecord,
    ReasonCode,
    Rejection,
    RevokeEditor,
    RevokeReader,
    RuleWarning,
    UpdateObject,
)
from schemas import records
from schemas.binary import (
    block_count,
    read_boolean,
    read_bytes,
    read_long,
    read_longs,
    read_optional_bytes,
    read_optional_long,
    read_optional_string,
    read_string,
    read_strings,
    write_bytes,
    write_long,
    write_longs,
    write_optional_bytes,
    write_optional_long,
    write_optional_string,
    write_string,
    write_strings,
)
from schemas.catalog import COMMAND, EVENT, REJECTION, SCHEMA_DIR, STATE, Schema
from schemas.wire import HEADER_SIZE

_KINDS = (CreateObject, UpdateObject, DeleteObject, GrantEditor, RevokeEditor, GrantReader,
          RevokeReader)  # the CommandKind symbols' order
_KIND_NAMES = dict(zip(_KINDS, ("CREATE", "UPDATE", "DELETE", "GRANT_EDITOR", "REVOKE_EDITOR", "GRANT_READER",
                                "REVOKE_READER"), strict=True))
_KIND_INDEX = {kind: i << 1 for i, kind in enumerate(_KINDS)}  # zig-zag, one byte each
_EVENT_TYPES = tuple(EventType)  # EventType's declaration order is the Avro enum's (checked below)
_EVENT_TYPE_INDEX = {t: i << 1 for i, t in enumerate(_EVENT_TYPES)}
_REASONS = tuple(ReasonCode)  # ReasonCode's declaration order is the Avro enum's (checked below)
_REASON_INDEX = {r: i << 1 for i, r in enumerate(_REASONS)}
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _end(data: bytes, pos: int) -> None:
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes")


def _enum_index(data: bytes, pos: int, size: int) -> int:
    b = data[pos]
    if b & 1 or b >> 1 >= size:
        raise ValueError(f"enum index byte {b} out of range")
    return b >> 1


def encode_command(out: bytearray, cmd: Command) -> None:
    """Append the body of ``cmd``."""
    out.append(_KIND_INDEX[type(cmd)])
    write_string(out, cmd.command_id)
    write_string(out, cmd.object_id)
    write_string(out, cmd.principal)
    write_long(out, records.micros(cmd.issued_at))
    write_optional_long(out, cmd.expected_version)
    write_optional_string(out, cmd.document if isinstance(cmd, CreateObject) else None)
    write_optional_string(out, cmd.patch if isinstance(cmd, UpdateObject) else None)
    write_optional_string(out, cmd.editor if isinstance(cmd, GrantEditor | RevokeEditor) else None)
    write_optional_string(out, cmd.reader if isinstance(cmd, GrantReader | RevokeReader) else None)
    write_strings(out, cmd.groups)
    write_optional_string(out, cmd.issuer)
    write_optional_string(out, cmd.jti)
    write_optional_string(out, cmd.object_type if isinstance(cmd, CreateObject) else None)


def decode_command(data: bytes) -> Command:
    """Return the command whose body starts at ``HEADER_SIZE``."""
    kind = _KINDS[_enum_index(data, HEADER_SIZE, len(_KINDS))]
    command_id, pos = read_string(data, HEADER_SIZE + 1)
    object_id, pos = read_string(data, pos)
    principal, pos = read_string(data, pos)
    issued_at, pos = read_long(data, pos)
    expected_version, pos = read_optional_long(data, pos)
    document, pos = read_optional_string(data, pos)
    patch, pos = read_optional_string(data, pos)
    editor, pos = read_optional_string(data, pos)
    reader, pos = read_optional_string(data, pos)
    group_list, pos = read_strings(data, pos)
    issuer, pos = read_optional_string(data, pos)
    jti, pos = read_optional_string(data, pos)
    object_type, pos = read_optional_string(data, pos)
    _end(data, pos)
    common = (command_id, object_id, principal, records.from_micros(issued_at), expected_version)
    groups = tuple(group_list)
    if kind is UpdateObject:
        return UpdateObject(*common, patch=_payload(kind, "patch", patch), groups=groups, issuer=issuer, jti=jti)
    if kind is CreateObject:
        return CreateObject(*common, document=_payload(kind, "document", document), groups=groups, issuer=issuer,
                            jti=jti, object_type=object_type)
    if kind is DeleteObject:
        return DeleteObject(*common, groups=groups, issuer=issuer, jti=jti)
    if kind is GrantEditor:
        return GrantEditor(*common, editor=_payload(kind, "editor", editor), groups=groups, issuer=issuer, jti=jti)
    if kind is RevokeEditor:
        return RevokeEditor(*common, editor=_payload(kind, "editor", editor), groups=groups, issuer=issuer, jti=jti)
    if kind is GrantReader:
        return GrantReader(*common, reader=_payload(kind, "reader", reader), groups=groups, issuer=issuer, jti=jti)
    return RevokeReader(*common, reader=_payload(kind, "reader", reader), groups=groups, issuer=issuer, jti=jti)


def _payload(kind: type, name: str, value: str | None) -> str:
    if value is None:
        raise ValueError(f"{_KIND_NAMES[kind]} command without {name}")
    return value


def encode_event(out: bytearray, ev: Event) -> None:
    """Append the body of ``ev``."""
    write_string(out, ev.event_id)
    out.append(_EVENT_TYPE_INDEX[ev.type])
    write_string(out, ev.object_id)
    write_long(out, ev.version)
    write_string(out, ev.command_id)
    write_string(out, ev.principal)
    write_long(out, records.micros(ev.occurred_at))
    write_string(out, ev.owner)
    write_optional_string(out, ev.document)
    write_optional_string(out, ev.patch)
    write_optional_string(out, ev.editor)
    write_optional_string(out, ev.reader)
    write_optional_string(out, ev.issuer)
    write_optional_string(out, ev.jti)
    write_optional_string(out, ev.object_type)
    write_optional_long(out, ev.rules_version)
    warnings = ev.warnings
    if warnings:
        write_long(out, len(warnings))
        for w in warnings:
            write_string(out, w.rule)
            write_string(out, w.mode)
            write_string(out, w.reason)
            write_string(out, w.message)
            write_strings(out, w.pointers)
    out.append(0)  # the end of the warnings array (or an empty one)


def decode_event(data: bytes) -> Event:
    """Return the event whose body starts at ``HEADER_SIZE``."""
    event_id, pos = read_string(data, HEADER_SIZE)
    etype = _EVENT_TYPES[_enum_index(data, pos, len(_EVENT_TYPES))]
    object_id, pos = read_string(data, pos + 1)
    version, pos = read_long(data, pos)
    command_id, pos = read_string(data, pos)
    principal, pos = read_string(data, pos)
    occurred_at, pos = read_long(data, pos)
    owner, pos = read_string(data, pos)
    document, pos = read_optional_string(data, pos)
    patch, pos = read_optional_string(data, pos)
    editor, pos = read_optional_string(data, pos)
    reader, pos = read_optional_string(data, pos)
    issuer, pos = read_optional_string(data, pos)
    jti, pos = read_optional_string(data, pos)
    object_type, pos = read_optional_string(data, pos)
    rules_version, pos = read_optional_long(data, pos)
    warnings: list[RuleWarning] = []
    count, pos = block_count(data, pos)
    while count:
        for _ in range(count):
            rule, pos = read_string(data, pos)
            mode, pos = read_string(data, pos)
            reason, pos = read_string(data, pos)
            message, pos = read_string(data, pos)
            pointers, pos = read_strings(data, pos)
            warnings.append(RuleWarning(rule, mode, reason, message, tuple(pointers)))
        count, pos = block_count(data, pos)
    _end(data, pos)
    return Event(event_id, etype, object_id, version, command_id, principal, records.from_micros(occurred_at),
                 owner, document, patch, editor, reader, issuer, jti, object_type, rules_version, tuple(warnings))


def encode_rejection(out: bytearray, rej: Rejection) -> None:
    """Append the body of ``rej``."""
    write_string(out, rej.rejection_id)
    out.append(_REASON_INDEX[rej.reason])
    write_string(out, rej.message)
    write_optional_string(out, rej.command_id)
    write_optional_string(out, rej.object_id)
    write_optional_string(out, rej.principal)
    write_optional_long(out, records.opt_micros(rej.occurred_at))
    write_optional_long(out, rej.current_version)
    write_optional_string(out, rej.original_outcome)
    write_optional_long(out, rej.original_version)
    o = rej.original
    if o is None:
        out.append(0)
    else:
        if not _INT_MIN <= o.partition <= _INT_MAX:
            raise OverflowError(f"partition {o.partition} does not fit an Avro int")
        out.append(2)
        write_string(out, o.topic)
        write_long(out, o.partition)
        write_long(out, o.offset)
        write_optional_bytes(out, o.key)
        write_optional_bytes(out, o.value)
        write_optional_long(out, o.key_length)
        write_optional_long(out, o.value_length)
        write_optional_string(out, o.key_sha256)
        write_optional_string(out, o.value_sha256)
    write_optional_string(out, rej.issuer)
    write_optional_string(out, rej.jti)
    write_optional_long(out, rej.rules_version)
    write_optional_string(out, rej.rule)
    write_optional_string(out, rej.rule_message)
    write_strings(out, rej.rule_pointers)


def decode_rejection(data: bytes) -> Rejection:
    """Return the rejection whose body starts at ``HEADER_SIZE``."""
    rejection_id, pos = read_string(data, HEADER_SIZE)
    reason = _REASONS[_enum_index(data, pos, len(_REASONS))]
    message, pos = read_string(data, pos + 1)
    command_id, pos = read_optional_string(data, pos)
    object_id, pos = read_optional_string(data, pos)
    principal, pos = read_optional_string(data, pos)
    occurred_at, pos = read_optional_long(data, pos)
    current_version, pos = read_optional_long(data, pos)
    original_outcome, pos = read_optional_string(data, pos)
    original_version, pos = read_optional_long(data, pos)
    branch = data[pos]
    original = None
    if branch == 2:
        topic, pos = read_string(data, pos + 1)
        partition, pos = read_long(data, pos)
        if not _INT_MIN <= partition <= _INT_MAX:
            raise ValueError(f"int {partition} out of range")
        offset, pos = read_long(data, pos)
        key, pos = read_optional_bytes(data, pos)
        value, pos = read_optional_bytes(data, pos)
        key_length, pos = read_optional_long(data, pos)
        value_length, pos = read_optional_long(data, pos)
        key_sha256, pos = read_optional_string(data, pos)
        value_sha256, pos = read_optional_string(data, pos)
        original = OriginalRecord(topic, partition, offset, key, value, key_length, value_length, key_sha256,
                                  value_sha256)
    elif branch == 0:
        pos += 1
    else:
        raise ValueError(f"union branch byte {branch} out of range")
    issuer, pos = read_optional_string(data, pos)
    jti, pos = read_optional_string(data, pos)
    rules_version, pos = read_optional_long(data, pos)
    rule, pos = read_optional_string(data, pos)
    rule_message, pos = read_optional_string(data, pos)
    pointers, pos = read_strings(data, pos)
    _end(data, pos)
    return Rejection(rejection_id, reason, message, command_id, object_id, principal,
                     records.opt_from_micros(occurred_at), current_version, original_outcome, original_version,
                     original, issuer, jti, rules_version, rule, rule_message, tuple(pointers))


def encode_state(out: bytearray, st: ObjectState) -> None:
    """Append the body of ``st``, its ``recent`` window as four parallel arrays."""
    out.append(1 if st.exists else 0)
    out.append(1 if st.deleted else 0)
    write_long(out, st.version)
    write_string(out, st.owner)
    write_strings(out, st.editors)
    write_optional_long(out, records.opt_micros(st.created_at))
    write_optional_long(out, records.opt_micros(st.updated_at))
    write_optional_long(out, records.opt_micros(st.deleted_at))
    write_long(out, st.document_size)
    recent = st.recent
    write_strings(out, [r.command_id for r in recent])
    write_strings(out, [r.outcome for r in recent])
    write_longs(out, [r.version for r in recent])
    write_longs(out, records.recent_micros(recent))
    write_strings(out, st.readers)
    write_strings(out, [r.principal or "" for r in recent])
    write_bytes(out, records.pack_fingerprints(recent))
    write_optional_string(out, st.object_type)
    write_optional_string(out, st.tracked)


def decode_state(data: bytes) -> ObjectState:
    """Return the state whose body starts at ``HEADER_SIZE``."""
    exists, pos = read_boolean(data, HEADER_SIZE)
    deleted, pos = read_boolean(data, pos)
    version, pos = read_long(data, pos)
    owner, pos = read_string(data, pos)
    editors, pos = read_strings(data, pos)
    created_at, pos = read_optional_long(data, pos)
    updated_at, pos = read_optional_long(data, pos)
    deleted_at, pos = read_optional_long(data, pos)
    document_size, pos = read_long(data, pos)
    ids, pos = read_strings(data, pos)
    outcomes, pos = read_strings(data, pos)
    versions, pos = read_longs(data, pos)
    ats, pos = read_longs(data, pos)
    readers, pos = read_strings(data, pos)
    principals, pos = read_strings(data, pos)
    fingerprints, pos = read_bytes(data, pos)
    object_type, pos = read_optional_string(data, pos)
    tracked, pos = read_optional_string(data, pos)
    _end(data, pos)
    return records.state_from_fields(exists, deleted, version, owner, editors, created_at, updated_at, deleted_at,
                                     document_size, ids, outcomes, versions, ats, readers, principals, fingerprints,
                                     object_type, tracked)


@dataclass(frozen=True, slots=True)
class CompiledCodec:
    """A hand-written encoder and decoder and the committed schema they implement."""

    schema: Schema
    encode: Callable[[bytearray, Any], None]
    decode: Callable[[bytes], Any]


def _load(file: str) -> Schema:
    schema: Schema = json.loads((SCHEMA_DIR / file).read_text("utf-8"))
    return schema


def _symbols(schema: Schema, field: str) -> list[str]:
    return next(f["type"]["symbols"] for f in schema["fields"] if f["name"] == field)


COMPILED: dict[str, CompiledCodec] = {
    COMMAND: CompiledCodec(_load("command.v4.avsc"), encode_command, decode_command),
    EVENT: CompiledCodec(_load("event.v5.avsc"), encode_event, decode_event),
    REJECTION: CompiledCodec(_load("rejection.v5.avsc"), encode_rejection, decode_rejection),
    STATE: CompiledCodec(_load("state.v3.avsc"), encode_state, decode_state),
}


@dataclass(frozen=True, slots=True)
class Predecessor:
    """An older version whose bodies are the compiled codec's own for the values it ``holds``.

    Its schema differs from the compiled one only by enum symbols the compiled one added at the end, so a value
    it holds has the same body in both: the codec writes such a value with the older version (its bytes, schema id
    included, stay what they were: a rejection with a reason v4 has is still a v4 record), and reads data written
    with it through the compiled decoder.
    """

    schema: Schema
    holds: Callable[[Any], bool]


_V4_REJECTION = _load("rejection.v4.avsc")
_V4_REASONS = len(_symbols(_V4_REJECTION, "reason"))
PREDECESSORS: dict[str, Predecessor] = {
    REJECTION: Predecessor(_V4_REJECTION, lambda rej: _REASON_INDEX[rej.reason] < _V4_REASONS << 1),
}

if _symbols(COMPILED[EVENT].schema, "type") != [t.value for t in _EVENT_TYPES] or _symbols(
        COMPILED[COMMAND].schema, "kind") != list(_KIND_NAMES.values()) or _symbols(
        COMPILED[REJECTION].schema, "reason") != [r.value for r in _REASONS] or _symbols(
        _V4_REJECTION, "reason") != [r.value for r in _REASONS[:_V4_REASONS]] or {
        **_V4_REJECTION, "doc": None, "fields": None} != {**COMPILED[REJECTION].schema, "doc": None, "fields": None}:
    raise ImportError("schemas.compiled's enum orders differ from the committed schemas")
