"""Encode and decode commands, events, rejections and state as Avro in the Confluent wire format.

The module-level functions use the repository's schema ids (``schemas/ids.json``), which every adapter
writes; with ``ARBITER_SCHEMA_REGISTRY_URL`` set, ``app.contract.registry`` makes the registry hold the same
ids at start (and the API serves them read-only otherwise, ``app.api.routes.registry``). Data is
written with the newest version of its subject, except a value an older version whose body is the same holds
(``schemas.compiled.PREDECESSORS``: a rejection with a reason rejection v4 has is written as v4, so its bytes
stay what they were); data written with an older version (any id the catalog knows) is read with the newest
schema through Avro schema resolution.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, NamedTuple

import fastavro

from commands import Command, Event, ObjectState, ReasonCode, Rejection
from schemas import records
from schemas.catalog import COMMAND, EVENT, REJECTION, STATE, SchemaCatalog, SchemaVersion, subject_of
from schemas.compiled import COMPILED, PREDECESSORS, CompiledCodec
from schemas.wire import HEADER_SIZE, DecodeError, header, schema_id_of

__all__ = ["Codec", "DecodeError", "decode_command", "decode_event", "decode_outcome", "decode_rejection",
           "decode_state", "default_codec", "encode_command", "encode_event", "encode_rejection", "encode_state",
           "schema_id_of"]

# What fastavro raises on bytes that do not match the schema, from truncation to bad unicode.
_AVRO_ERRORS = (EOFError, ValueError, TypeError, KeyError, IndexError, OverflowError, StopIteration,
                AttributeError, MemoryError)

SchemaFetcher = Callable[[int], dict[str, Any] | None]

_TO_RECORD: dict[str, Callable[[Any], records.Record]] = {
    COMMAND: records.command_to_record,
    EVENT: records.event_to_record,
    REJECTION: records.rejection_to_record,
    STATE: records.state_to_record,
}
_FROM_RECORD: dict[str, Callable[[records.Record], Any]] = {
    COMMAND: records.command_from_record,
    EVENT: records.event_from_record,
    REJECTION: records.rejection_from_record,
    STATE: records.state_from_record,
}


class _Reader(NamedTuple):
    subject: str
    writer: Any
    reader: Any
    compiled: Callable[[bytes], Any] | None


def _compiled(version: SchemaVersion) -> CompiledCodec | None:
    compiled = COMPILED.get(version.subject)
    return compiled if compiled is not None and compiled.schema == version.schema else None


def _checked(decode: Callable[[bytes], Any], holds: Callable[[Any], bool]) -> Callable[[bytes], Any]:
    """Return ``decode`` refusing a value its writer schema (a predecessor) cannot hold."""
    def checked(data: bytes) -> Any:  # noqa: ANN401 - a decoded record
        value = decode(data)
        if not holds(value):
            raise ValueError("an enum symbol its writer schema does not have")
        return value
    return checked


class Codec:
    """Encoder and decoder over one ``SchemaCatalog``; unknown ids may be fetched once from a registry.

    A subject whose newest schema is one of ``schemas.compiled``'s is written, and read when the data's
    writer schema is that same one, by the hand-compiled codec; everything else goes through fastavro.
    """

    def __init__(self, catalog: SchemaCatalog, fetch: SchemaFetcher | None = None) -> None:
        self.catalog = catalog
        self._fetch = fetch
        self._readers: dict[int, _Reader] = {}
        self._writers: dict[str, tuple[bytes, Any, Callable[[bytearray, Any], None] | None]] = {}
        for subject in (COMMAND, EVENT, REJECTION, STATE):
            latest = catalog.latest(subject)
            compiled = _compiled(latest)
            self._writers[subject] = (header(latest.schema_id), latest.parsed,
                                      compiled.encode if compiled is not None else None)
        # Per subject whose compiled writer has a predecessor the catalog knows: its header and what it holds.
        self._older: dict[str, tuple[bytes, Callable[[Any], bool]]] = {}
        for subject, pred in PREDECESSORS.items():
            older = [v for v in catalog.versions() if v.subject == subject and v.schema == pred.schema]
            if older and self._writers[subject][2] is not None:
                self._older[subject] = (header(older[0].schema_id), pred.holds)

    def _encode(self, subject: str, value: Any) -> bytes:
        head, parsed, compiled = self._writers[subject]
        if compiled is not None:
            older = self._older.get(subject)
            out = bytearray(older[0] if older is not None and older[1](value) else head)
            compiled(out, value)
            return bytes(out)
        buf = io.BytesIO()
        buf.write(head)
        fastavro.schemaless_writer(buf, parsed, _TO_RECORD[subject](value))
        return buf.getvalue()

    def _reader(self, schema_id: int) -> _Reader:
        reader = self._readers.get(schema_id)
        if reader is None:
            version = self.catalog.by_id(schema_id) or self._fetched(schema_id)
            if version is None:
                raise DecodeError(f"unknown schema id {schema_id}", ReasonCode.UNSUPPORTED_SCHEMA)
            latest = self.catalog.latest(version.subject)
            resolved = None if latest.schema_id == schema_id else latest.parsed
            compiled = _compiled(version) if resolved is None else None
            decode = compiled.decode if compiled is not None else None
            pred = PREDECESSORS.get(version.subject)
            if pred is not None and pred.schema == version.schema and _compiled(latest) is not None:
                resolved, decode = None, _checked(COMPILED[version.subject].decode, pred.holds)
            reader = self._readers[schema_id] = _Reader(version.subject, version.parsed, resolved, decode)
        return reader

    def _fetched(self, schema_id: int) -> SchemaVersion | None:
        schema = self._fetch(schema_id) if self._fetch is not None else None
        if schema is None:
            return None
        subject = subject_of(schema)
        try:
            self.catalog.latest(subject)
        except KeyError:
            return None
        # A writer the registry knows but the repository does not: read it with our newest schema.
        version = SchemaVersion(subject, 0, schema_id, schema)
        self.catalog.add(version)
        return version

    def _decode(self, data: bytes, *subjects: str) -> Any:
        schema_id = schema_id_of(data)
        subject, writer, reader, compiled = self._reader(schema_id)
        if subject not in subjects:
            raise DecodeError(f"schema id {schema_id} is {subject}, expected {' or '.join(subjects)}",
                              ReasonCode.UNSUPPORTED_SCHEMA)
        if compiled is not None:
            try:
                return compiled(data if type(data) is bytes else bytes(data))
            except _AVRO_ERRORS as e:
                raise DecodeError(f"undecodable {subject} body: {e!r}", ReasonCode.MALFORMED) from e
        buf = io.BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            record = fastavro.schemaless_reader(buf, writer, reader)
        except _AVRO_ERRORS as e:
            raise DecodeError(f"undecodable {subject} body: {e!r}", ReasonCode.MALFORMED) from e
        if buf.tell() != len(data):
            raise DecodeError(f"{len(data) - buf.tell()} trailing bytes after {subject}", ReasonCode.MALFORMED)
        if not isinstance(record, dict):
            raise DecodeError(f"{subject} body is not a record", ReasonCode.MALFORMED)
        try:
            return _FROM_RECORD[subject](record)
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise DecodeError(f"invalid {subject}: {e}", ReasonCode.MALFORMED) from e

    def encode_command(self, cmd: Command) -> bytes:
        """Return ``cmd`` in the wire format."""
        return self._encode(COMMAND, cmd)

    def decode_command(self, data: bytes) -> Command:
        """Return the command in ``data``; raise ``DecodeError``."""
        cmd: Command = self._decode(data, COMMAND)
        return cmd

    def encode_event(self, ev: Event) -> bytes:
        """Return ``ev`` in the wire format."""
        return self._encode(EVENT, ev)

    def decode_event(self, data: bytes) -> Event:
        """Return the event in ``data``; raise ``DecodeError``."""
        ev: Event = self._decode(data, EVENT)
        return ev

    def encode_rejection(self, rej: Rejection) -> bytes:
        """Return ``rej`` in the wire format."""
        return self._encode(REJECTION, rej)

    def decode_rejection(self, data: bytes) -> Rejection:
        """Return the rejection in ``data``; raise ``DecodeError``."""
        rej: Rejection = self._decode(data, REJECTION)
        return rej

    def encode_state(self, st: ObjectState) -> bytes:
        """Return ``st`` in the wire format."""
        return self._encode(STATE, st)

    def decode_state(self, data: bytes) -> ObjectState:
        """Return the state in ``data``; raise ``DecodeError``."""
        st: ObjectState = self._decode(data, STATE)
        return st

    def encode_outcome(self, outcome: Event | Rejection) -> bytes:
        """Return an event or a rejection in the wire format."""
        return self.encode_event(outcome) if isinstance(outcome, Event) else self.encode_rejection(outcome)

    def decode_outcome(self, data: bytes) -> Event | Rejection:
        """Return the event or rejection in ``data``, told apart by schema id; raise ``DecodeError``."""
        outcome: Event | Rejection = self._decode(data, EVENT, REJECTION)
        return outcome


default_codec = Codec(SchemaCatalog.repository())

encode_command = default_codec.encode_command
decode_command = default_codec.decode_command
encode_event = default_codec.encode_event
decode_event = default_codec.decode_event
encode_rejection = default_codec.encode_rejection
decode_rejection = default_codec.decode_rejection
encode_state = default_codec.encode_state
decode_state = default_codec.decode_state
encode_outcome = default_codec.encode_outcome
decode_outcome = default_codec.decode_outcome
