"""Mapping between the domain's dataclasses and the plain dicts fastavro reads and writes."""

from __future__ import annotations

from typing import Any

from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    EventType,
    GrantEditor,
    ObjectState,
    OriginalRecord,
    ReasonCode,
    RecentCommand,
    Rejection,
    RevokeEditor,
    UpdateObject,
)

Record = dict[str, Any]

_KIND_OF: dict[type, str] = {
    CreateObject: "CREATE",
    UpdateObject: "UPDATE",
    DeleteObject: "DELETE",
    GrantEditor: "GRANT_EDITOR",
    RevokeEditor: "REVOKE_EDITOR",
}


def command_to_record(cmd: Command) -> Record:
    """Return ``cmd`` as a Command record."""
    return {
        "kind": _KIND_OF[type(cmd)],
        "command_id": cmd.command_id,
        "object_id": cmd.object_id,
        "principal": cmd.principal,
        "issued_at": cmd.issued_at,
        "expected_version": cmd.expected_version,
        "document": cmd.document if isinstance(cmd, CreateObject) else None,
        "patch": cmd.patch if isinstance(cmd, UpdateObject) else None,
        "editor": cmd.editor if isinstance(cmd, GrantEditor | RevokeEditor) else None,
    }


def _required(rec: Record, name: str) -> Any:
    value = rec[name]
    if value is None:
        raise ValueError(f"{rec['kind']} command without {name}")
    return value


def command_from_record(rec: Record) -> Command:
    """Return the command in a Command record; raise ValueError if its payload is missing."""
    kind = rec["kind"]
    common = (rec["command_id"], rec["object_id"], rec["principal"], rec["issued_at"], rec["expected_version"])
    if kind == "CREATE":
        return CreateObject(*common, document=_required(rec, "document"))
    if kind == "UPDATE":
        return UpdateObject(*common, patch=_required(rec, "patch"))
    if kind == "DELETE":
        return DeleteObject(*common)
    if kind == "GRANT_EDITOR":
        return GrantEditor(*common, editor=_required(rec, "editor"))
    if kind == "REVOKE_EDITOR":
        return RevokeEditor(*common, editor=_required(rec, "editor"))
    raise ValueError(f"unknown command kind {kind!r}")


def event_to_record(ev: Event) -> Record:
    """Return ``ev`` as an Event record."""
    return {
        "event_id": ev.event_id, "type": ev.type.value, "object_id": ev.object_id, "version": ev.version,
        "command_id": ev.command_id, "principal": ev.principal, "occurred_at": ev.occurred_at, "owner": ev.owner,
        "document": ev.document, "patch": ev.patch, "editor": ev.editor,
    }


def event_from_record(rec: Record) -> Event:
    """Return the event in an Event record."""
    return Event(rec["event_id"], EventType(rec["type"]), rec["object_id"], rec["version"], rec["command_id"],
                 rec["principal"], rec["occurred_at"], rec["owner"], rec["document"], rec["patch"], rec["editor"])


def rejection_to_record(rej: Rejection) -> Record:
    """Return ``rej`` as a Rejection record."""
    o = rej.original
    original = None if o is None else {
        "topic": o.topic, "partition": o.partition, "offset": o.offset, "key": o.key, "value": o.value}
    return {
        "rejection_id": rej.rejection_id, "reason": rej.reason.value, "message": rej.message,
        "command_id": rej.command_id, "object_id": rej.object_id, "principal": rej.principal,
        "occurred_at": rej.occurred_at, "current_version": rej.current_version,
        "original_outcome": rej.original_outcome, "original_version": rej.original_version, "original": original,
    }


def rejection_from_record(rec: Record) -> Rejection:
    """Return the rejection in a Rejection record."""
    o = rec["original"]
    original = None if o is None else OriginalRecord(o["topic"], o["partition"], o["offset"], o["key"], o["value"])
    return Rejection(rec["rejection_id"], ReasonCode(rec["reason"]), rec["message"], rec["command_id"],
                     rec["object_id"], rec["principal"], rec["occurred_at"], rec["current_version"],
                     rec["original_outcome"], rec["original_version"], original)


def state_to_record(st: ObjectState) -> Record:
    """Return ``st`` as an ObjectState record."""
    return {
        "exists": st.exists, "deleted": st.deleted, "version": st.version, "owner": st.owner,
        "editors": list(st.editors), "created_at": st.created_at, "updated_at": st.updated_at,
        "deleted_at": st.deleted_at, "document_size": st.document_size,
        "recent": [{"command_id": r.command_id, "outcome": r.outcome, "version": r.version, "at": r.at}
                   for r in st.recent],
    }


def state_from_record(rec: Record) -> ObjectState:
    """Return the state in an ObjectState record."""
    recent = tuple(RecentCommand(r["command_id"], r["outcome"], r["version"], r["at"]) for r in rec["recent"])
    return ObjectState(rec["exists"], rec["deleted"], rec["version"], rec["owner"], tuple(rec["editors"]),
                       rec["created_at"], rec["updated_at"], rec["deleted_at"], rec["document_size"], recent)
