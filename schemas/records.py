"""Mapping between the domain's dataclasses and the plain dicts fastavro reads and writes.

Timestamps cross this boundary as ints of microseconds since the epoch: the codec parses schemas without
their ``timestamp-micros`` annotations (the bytes are the same) because converting here is several times
cheaper than fastavro's per-value logical-type hooks. Dataclasses are built with positional arguments.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

from fastavro.write import LOGICAL_WRITERS

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
    RecentCommand,
    Rejection,
    RevokeEditor,
    RevokeReader,
    RuleWarning,
    UpdateObject,
)

Record = dict[str, Any]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_naive_micros = LOGICAL_WRITERS["long-timestamp-micros"]


def micros(at: datetime) -> int:
    """Return ``at`` as microseconds since the epoch, exactly (naive values as fastavro would take them)."""
    try:
        d = at - _EPOCH
    except TypeError:
        return int(_naive_micros(at, {}))
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def opt_micros(at: datetime | None) -> int | None:
    """Return ``micros(at)``, or None for None."""
    return None if at is None else micros(at)


def from_micros(value: int) -> datetime:
    """Return the UTC datetime ``value`` microseconds after the epoch."""
    return _EPOCH + timedelta(0, 0, value)  # positional: a third cheaper than microseconds=


def opt_from_micros(value: int | None) -> datetime | None:
    """Return ``from_micros(value)``, or None for None."""
    return None if value is None else _EPOCH + timedelta(0, 0, value)


def recent_micros(recent: tuple[RecentCommand, ...]) -> list[int]:
    """Return the ``at`` of each entry in microseconds since the epoch."""
    try:
        return [(r.at - _EPOCH) // _MICROSECOND for r in recent]
    except TypeError:  # a naive datetime: let micros() take it the slow way
        return [micros(r.at) for r in recent]


# RecentCommand is built ~16 times per decoded state; setting its slots directly skips the frozen
# dataclass __init__ (one object.__setattr__ call per field), about 40% cheaper. It has no __post_init__.
if [f.name for f in fields(RecentCommand)] != ["command_id", "outcome", "version", "at", "principal",
                                                "fingerprint"]:
    raise ImportError("schemas.records builds RecentCommand by its fields; update _slot_recent")
_slots = vars(RecentCommand)
_set_command_id = _slots["command_id"].__set__
_set_outcome = _slots["outcome"].__set__
_set_version = _slots["version"].__set__
_set_at = _slots["at"].__set__
_set_principal = _slots["principal"].__set__
_set_fingerprint = _slots["fingerprint"].__set__
_new = object.__new__


def _slot_recent(command_id: str, outcome: str, version: int, at_micros: int, principal: str | None,
                 fingerprint: int | None) -> RecentCommand:
    entry: RecentCommand = _new(RecentCommand)
    _set_command_id(entry, command_id)
    _set_outcome(entry, outcome)
    _set_version(entry, version)
    _set_at(entry, _EPOCH + timedelta(0, 0, at_micros))
    _set_principal(entry, principal)
    _set_fingerprint(entry, fingerprint)
    return entry


def _init_recent(command_id: str, outcome: str, version: int, at_micros: int, principal: str | None,
                 fingerprint: int | None) -> RecentCommand:
    return RecentCommand(command_id, outcome, version, _EPOCH + timedelta(0, 0, at_micros), principal, fingerprint)


# Compiled by mypyc (app/native/loader.py), RecentCommand is a native class that object.__new__ refuses to build;
# there its constructor is the fast way. Chosen once here, by trying.
try:
    _new(RecentCommand)
    _new_recent = _slot_recent
except TypeError:
    _new_recent = _init_recent


_KIND_OF: dict[type, str] = {
    CreateObject: "CREATE",
    UpdateObject: "UPDATE",
    DeleteObject: "DELETE",
    GrantEditor: "GRANT_EDITOR",
    RevokeEditor: "REVOKE_EDITOR",
    GrantReader: "GRANT_READER",
    RevokeReader: "REVOKE_READER",
}


def command_to_record(cmd: Command) -> Record:
    """Return ``cmd`` as a Command record."""
    return {
        "kind": _KIND_OF[type(cmd)],
        "command_id": cmd.command_id,
        "object_id": cmd.object_id,
        "principal": cmd.principal,
        "issued_at": micros(cmd.issued_at),
        "expected_version": cmd.expected_version,
        "document": cmd.document if isinstance(cmd, CreateObject) else None,
        "patch": cmd.patch if isinstance(cmd, UpdateObject) else None,
        "editor": cmd.editor if isinstance(cmd, GrantEditor | RevokeEditor) else None,
        "reader": cmd.reader if isinstance(cmd, GrantReader | RevokeReader) else None,
        "groups": list(cmd.groups),
        "issuer": cmd.issuer,
        "jti": cmd.jti,
        "object_type": cmd.object_type if isinstance(cmd, CreateObject) else None,
    }


def _required(rec: Record, name: str) -> Any:
    value = rec[name]
    if value is None:
        raise ValueError(f"{rec['kind']} command without {name}")
    return value


def command_from_record(rec: Record) -> Command:
    """Return the command in a Command record; raise ValueError if its payload is missing."""
    kind = rec["kind"]
    common = (rec["command_id"], rec["object_id"], rec["principal"], from_micros(rec["issued_at"]),
              rec["expected_version"])
    groups: tuple[str, ...] = tuple(rec.get("groups") or ())
    issuer: str | None = rec.get("issuer")
    jti: str | None = rec.get("jti")
    if kind == "UPDATE":
        return UpdateObject(*common, patch=_required(rec, "patch"), groups=groups, issuer=issuer, jti=jti)
    if kind == "CREATE":
        return CreateObject(*common, document=_required(rec, "document"), groups=groups, issuer=issuer, jti=jti,
                            object_type=rec.get("object_type"))
    if kind == "DELETE":
        return DeleteObject(*common, groups=groups, issuer=issuer, jti=jti)
    if kind == "GRANT_EDITOR":
        return GrantEditor(*common, editor=_required(rec, "editor"), groups=groups, issuer=issuer, jti=jti)
    if kind == "REVOKE_EDITOR":
        return RevokeEditor(*common, editor=_required(rec, "editor"), groups=groups, issuer=issuer, jti=jti)
    if kind == "GRANT_READER":
        return GrantReader(*common, reader=_required(rec, "reader"), groups=groups, issuer=issuer, jti=jti)
    if kind == "REVOKE_READER":
        return RevokeReader(*common, reader=_required(rec, "reader"), groups=groups, issuer=issuer, jti=jti)
    raise ValueError(f"unknown command kind {kind!r}")


def event_to_record(ev: Event) -> Record:
    """Return ``ev`` as an Event record."""
    return {
        "event_id": ev.event_id, "type": ev.type.value, "object_id": ev.object_id, "version": ev.version,
        "command_id": ev.command_id, "principal": ev.principal, "occurred_at": micros(ev.occurred_at),
        "owner": ev.owner, "document": ev.document, "patch": ev.patch, "editor": ev.editor, "reader": ev.reader,
        "issuer": ev.issuer, "jti": ev.jti, "object_type": ev.object_type, "rules_version": ev.rules_version,
        "warnings": [{"rule": w.rule, "mode": w.mode, "reason": w.reason, "message": w.message,
                      "pointers": list(w.pointers)} for w in ev.warnings],
    }


def event_from_record(rec: Record) -> Event:
    """Return the event in an Event record."""
    return Event(rec["event_id"], EventType(rec["type"]), rec["object_id"], rec["version"], rec["command_id"],
                 rec["principal"], from_micros(rec["occurred_at"]), rec["owner"], rec["document"], rec["patch"],
                 rec["editor"], rec.get("reader"), rec.get("issuer"), rec.get("jti"), rec.get("object_type"),
                 rec.get("rules_version"), tuple(RuleWarning(w["rule"], w["mode"], w["reason"], w["message"],
                                                             tuple(w["pointers"])) for w in rec.get("warnings", ())))


def rejection_to_record(rej: Rejection) -> Record:
    """Return ``rej`` as a Rejection record."""
    o = rej.original
    original = None if o is None else {
        "topic": o.topic, "partition": o.partition, "offset": o.offset, "key": o.key, "value": o.value,
        "key_length": o.key_length, "value_length": o.value_length, "key_sha256": o.key_sha256,
        "value_sha256": o.value_sha256}
    return {
        "rejection_id": rej.rejection_id, "reason": rej.reason.value, "message": rej.message,
        "command_id": rej.command_id, "object_id": rej.object_id, "principal": rej.principal,
        "occurred_at": opt_micros(rej.occurred_at), "current_version": rej.current_version,
        "original_outcome": rej.original_outcome, "original_version": rej.original_version, "original": original,
        "issuer": rej.issuer, "jti": rej.jti, "rules_version": rej.rules_version, "rule": rej.rule,
        "rule_message": rej.rule_message, "rule_pointers": list(rej.rule_pointers),
    }


def rejection_from_record(rec: Record) -> Rejection:
    """Return the rejection in a Rejection record."""
    o = rec["original"]
    original = None if o is None else OriginalRecord(o["topic"], o["partition"], o["offset"], o["key"], o["value"],
                                                     o.get("key_length"), o.get("value_length"),
                                                     o.get("key_sha256"), o.get("value_sha256"))
    return Rejection(rec["rejection_id"], ReasonCode(rec["reason"]), rec["message"], rec["command_id"],
                     rec["object_id"], rec["principal"], opt_from_micros(rec["occurred_at"]),
                     rec["current_version"], rec["original_outcome"], rec["original_version"], original,
                     rec.get("issuer"), rec.get("jti"), rec.get("rules_version"), rec.get("rule"),
                     rec.get("rule_message"), tuple(rec.get("rule_pointers") or ()))


def state_to_record(st: ObjectState) -> Record:
    """Return ``st`` as an ObjectState record; ``recent`` becomes four parallel arrays."""
    recent = st.recent
    return {
        "exists": st.exists, "deleted": st.deleted, "version": st.version, "owner": st.owner,
        "editors": st.editors, "created_at": opt_micros(st.created_at), "updated_at": opt_micros(st.updated_at),
        "deleted_at": opt_micros(st.deleted_at), "document_size": st.document_size,
        "recent_command_ids": [r.command_id for r in recent],
        "recent_outcomes": [r.outcome for r in recent],
        "recent_versions": [r.version for r in recent],
        "recent_at": recent_micros(recent),
        "readers": st.readers,
        "recent_principals": [r.principal or "" for r in recent],
        "recent_fingerprints": pack_fingerprints(recent),
        "object_type": st.object_type,
        "tracked": st.tracked,
    }


def _as_bytes(value: bytes | str) -> bytes:
    # A bytes field filled from its schema default (data written by v1) reaches us as the default's JSON string,
    # whose code points 0-255 are the bytes (Avro specification, "default values" of bytes).
    return value.encode("latin-1") if isinstance(value, str) else value


def pack_fingerprints(recent: tuple[RecentCommand, ...]) -> bytes:
    """Return the window's fingerprints as 8 big-endian bytes each (0 for none): the ``recent_fingerprints`` value."""
    return struct.pack(f">{len(recent)}q", *[r.fingerprint or 0 for r in recent])


def state_from_record(rec: Record) -> ObjectState:
    """Return the state in an ObjectState record; raise ValueError if its ``recent`` arrays differ in length."""
    return state_from_fields(rec["exists"], rec["deleted"], rec["version"], rec["owner"], rec["editors"],
                             rec["created_at"], rec["updated_at"], rec["deleted_at"], rec["document_size"],
                             rec["recent_command_ids"], rec["recent_outcomes"], rec["recent_versions"],
                             rec["recent_at"], rec.get("readers", []), rec.get("recent_principals", []),
                             _as_bytes(rec.get("recent_fingerprints", b"")), rec.get("object_type"),
                             rec.get("tracked"))


def state_from_fields(exists: bool, deleted: bool, version: int, owner: str, editors: list[str],
                      created_at: int | None, updated_at: int | None, deleted_at: int | None, document_size: int,
                      ids: list[str], outcomes: list[str], versions: list[int], ats: list[int],
                      readers: list[str] | None = None, principals: list[str] | None = None,
                      fingerprints: bytes = b"", object_type: str | None = None,
                      tracked: str | None = None) -> ObjectState:
    """Return the state with these ObjectState record fields; raise ValueError if the arrays differ in length.

    Empty ``principals`` and ``fingerprints`` with a non-empty window mean state written by schema v1: its
    entries get None for both (see ``commands.state``); within a v2 window "" and 0 mean None.
    """
    n = len(ids)
    if len(outcomes) != n or len(versions) != n or len(ats) != n:
        raise ValueError(f"recent arrays differ in length: {n}, {len(outcomes)}, {len(versions)}, {len(ats)}")
    # "" and 0 stand for None inside a v2 window (an entry carried over from v1 state).
    who: list[str | None] = [p or None for p in principals] if principals else [None] * n
    if fingerprints and len(fingerprints) != 8 * n:
        raise ValueError(f"recent_fingerprints holds {len(fingerprints)} bytes for {n} entries")
    prints: list[int | None] = [f or None for f in struct.unpack(f">{n}q", fingerprints)] if fingerprints else [None] * n
    if len(who) != n or len(prints) != n:
        raise ValueError(f"recent arrays differ in length: {n} ids, {len(who)} principals, {len(prints)} fingerprints")
    return ObjectState(exists, deleted, version, owner, tuple(editors), opt_from_micros(created_at),
                       opt_from_micros(updated_at), opt_from_micros(deleted_at), document_size,
                       tuple(map(_new_recent, ids, outcomes, versions, ats, who, prints)),
                       tuple(readers) if readers else (), object_type, tracked)
