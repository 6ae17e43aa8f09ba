"""The rules control record's wire format, and the catalog's record of where a deploy placed it.

The control record: one per partition of ``commands``, switching that shard's rules at its offset. It is
recognised by its ``arbiter-control: rules`` header, before anything tries to decode it as a command. Its key is
``CONTROL_KEY``; its value is canonical JSON (sorted keys, no spaces) of a ``Deploy``: the version, the document's
digest, the canonical document, who deployed it and when. It is signed exactly like a
command record (``app.signing``), so the validator rejects an unsigned or forged one ``UNAUTHENTICATED``. The same
value is the deploy's claim on the catalog topic (``app.rules.catalog``).

The placement (``Placed``): after its control records are written, a deploy appends to the catalog where they landed
(the offset on each partition of ``commands``), under the same key, header ``arbiter-control: rules-placed``. The
audit projection chains the catalog, so the trail says who deployed which version and digest, and from which offset
of each partition it decides. Here, not in ``app``: the audit projection decodes both (``projections`` never
imports ``app``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from commands.errors import ArbiterError

CONTROL_HEADER = "arbiter-control"
RULES_CONTROL = b"rules"
RULES_PLACED = b"rules-placed"  # the header of a placement record on the catalog (never a control record)
CONTROL_KEY = b"arbiter:rules"
_FIELDS = ("deployed_at", "digest", "document", "issuer", "principal", "version")
_PLACED_FIELDS = ("digest", "offsets", "placed_at", "principal", "topic", "version")


class ControlInvalid(ArbiterError):
    """A record marked as a rules control record whose value is not a well-formed ``Deploy``."""

    code = "RULES_CONTROL_INVALID"


@dataclass(frozen=True, slots=True)
class Deploy:
    """One deployed rules version as it travels on the commands topic."""

    version: int
    digest: str
    document: str  # canonical JSON of the rules document (``commands.rules.canonical_rules``)
    principal: str
    deployed_at: datetime
    issuer: str | None = None


def is_control(header: bytes | None) -> bool:
    """Return whether a record's ``arbiter-control`` header marks it as a rules control record."""
    return header is not None and bytes(header) == RULES_CONTROL


def encode_control(deploy: Deploy) -> bytes:
    """Return the control record's value: canonical JSON of ``deploy`` (the same bytes for the same deploy)."""
    body = {"deployed_at": _rfc3339(deploy.deployed_at), "digest": deploy.digest, "document": deploy.document,
            "issuer": deploy.issuer, "principal": deploy.principal, "version": deploy.version}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_control(value: bytes | None) -> Deploy:
    """Parse a control record's value; raise ``ControlInvalid`` naming what is wrong."""
    body = _object(value, "control")
    if not isinstance(body, dict) or sorted(body) != list(_FIELDS):
        raise ControlInvalid(f"the rules control record must hold exactly {list(_FIELDS)}")
    version, digest, document, principal = body["version"], body["digest"], body["document"], body["principal"]
    issuer, at = body["issuer"], body["deployed_at"]
    if type(version) is not int or version < 1:
        raise ControlInvalid(f"rules version must be a positive integer, not {version!r}")
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise ControlInvalid("rules digest must be 'sha256:<hex>'")
    if not isinstance(document, str) or not isinstance(principal, str) or not principal:
        raise ControlInvalid("rules document and principal must be non-empty strings")
    if issuer is not None and not isinstance(issuer, str):
        raise ControlInvalid("issuer must be a string or null")
    return Deploy(version, digest, document, principal, _when(at, "deployed_at"), issuer)


@dataclass(frozen=True, slots=True)
class Placed:
    """Where one deploy's control records landed: ``offsets`` maps each partition of ``topic`` to the record's offset.

    ``principal`` wrote them (the claim's deployer, or whoever finished a stopped deploy by deploying it again).
    """

    version: int
    digest: str
    principal: str
    placed_at: datetime
    topic: str
    offsets: dict[int, int]


def encode_placed(placed: Placed) -> bytes:
    """Return a placement record's value: canonical JSON (sorted keys, partitions as decimal strings)."""
    body = {"digest": placed.digest, "offsets": {str(p): o for p, o in placed.offsets.items()},
            "placed_at": _rfc3339(placed.placed_at), "principal": placed.principal, "topic": placed.topic,
            "version": placed.version}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_placed(value: bytes | None) -> Placed:
    """Parse a placement record's value; raise ``ControlInvalid`` naming what is wrong."""
    body = _object(value, "placement")
    if not isinstance(body, dict) or sorted(body) != list(_PLACED_FIELDS):
        raise ControlInvalid(f"a rules placement record must hold exactly {list(_PLACED_FIELDS)}")
    version, digest, principal, topic, offsets = (body["version"], body["digest"], body["principal"], body["topic"],
                                                  body["offsets"])
    if type(version) is not int or version < 1 or not isinstance(digest, str) or not isinstance(principal, str) \
            or not isinstance(topic, str) or not isinstance(offsets, dict):
        raise ControlInvalid("a rules placement record needs a positive version, a digest, a principal, a topic and "
                             "offsets")
    try:
        placed = {int(p): o for p, o in offsets.items()}
    except ValueError as e:
        raise ControlInvalid(f"placement offsets must be keyed by partition number: {e}") from e
    if any(type(o) is not int or o < 0 or p < 0 for p, o in placed.items()):
        raise ControlInvalid("placement offsets must map partitions to non-negative offsets")
    return Placed(version, digest, principal, _when(body["placed_at"], "placed_at"), topic, placed)


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _object(value: bytes | None, what: str) -> Any:  # noqa: ANN401 - parsed JSON, checked by the caller
    if value is None:
        raise ControlInvalid(f"the rules {what} record has no value")
    try:
        body = json.loads(bytes(value))
    except (ValueError, UnicodeDecodeError) as e:
        raise ControlInvalid(f"the rules {what} record is not JSON: {e}") from e
    return body


def _when(at: object, name: str) -> datetime:
    try:
        when = datetime.fromisoformat(at) if isinstance(at, str) else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise ControlInvalid(f"{name} must be an RFC 3339 time with a zone, not {at!r}")
    return when.astimezone(UTC)
