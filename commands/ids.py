"""Deterministic identifiers: uuid5 names for events and rejections, so replays give the same ids."""

from __future__ import annotations

import hashlib
import uuid

#: Fixed namespace of every Arbiter uuid5; changing it would change every event id ever emitted.
ARBITER_NAMESPACE = uuid.UUID("6f1c2a4e-3b7d-5e8f-9a10-a7b1c2d3e4f5")
_NAMESPACE_BYTES = ARBITER_NAMESPACE.bytes


#: Object ids in this namespace are Arbiter's own records' keys (``arbiter:rules``, ``arbiter:generation``): the
#: API refuses them (``RESERVED_ID``) and ``decide`` rejects them ``MALFORMED``, so no user's command is signed under
#: such a key nor shares their audit trail.
RESERVED_PREFIX = "arbiter:"


def reserved(object_id: str) -> bool:
    """Return whether ``object_id`` is in the namespace reserved for Arbiter's own records."""
    return object_id.startswith(RESERVED_PREFIX)


def uuid5(name: str) -> str:
    """Return ``str(uuid.uuid5(ARBITER_NAMESPACE, name))``, a few times faster than the stdlib route."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode("utf-8"), usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def event_id(object_id: str, version: int) -> str:
    """Return the id of the event that brought ``object_id`` to ``version``."""
    return uuid5(f"{object_id}:{version}")


def command_rejection_id(command_id: str, object_id: str, state_version: int, reason: str,
                         principal: str = "") -> str:
    """Return the id of the rejection of ``principal``'s ``command_id`` against ``object_id`` at ``state_version``.

    The principal is part of the name: command ids are idempotency keys of their principal, so two principals'
    commands with one id are two commands, and their rejections two records.
    """
    return uuid5(f"rejection:{principal}:{command_id}:{object_id}:{state_version}:{reason}")


def record_rejection_id(topic: str, partition: int, offset: int, reason: str) -> str:
    """Return the id of the rejection of the Kafka record at ``topic[partition]@offset``."""
    return uuid5(f"record:{topic}:{partition}:{offset}:{reason}")


def redrive_command_id(topic: str, partition: int, offset: int) -> str:
    """Return the command id a redrive of the parked record from ``topic[partition]@offset`` gives the operator's
    fixed value (the parked bytes themselves keep their own: ``app.parked.lot``).

    Derived from the record's coordinates alone, so every redrive of one record is one command to the validator's
    dedup window (a second is a ``DUPLICATE``), whatever fix the operator made in between.
    """
    return uuid5(f"redrive:{topic}:{partition}:{offset}")
