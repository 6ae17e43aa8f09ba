"""The rules control record: one per partition of ``commands``, switching that shard's rules at its offset.

A control record is recognised by its ``arbiter-control: rules`` header, before anything tries to decode it as a
command. Its key is ``CONTROL_KEY``; its value is canonical JSON (sorted keys, no spaces) of a ``Deploy``:
the version, the document's digest, the canonical document, who deployed it and when. It is signed exactly like a
command record (``app.signing``), so the validator rejects an unsigned or forged one ``UNAUTHENTICATED``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from app.errors import ArbiterError
from app.signing import RecordSigner

CONTROL_HEADER = "arbiter-control"
RULES_CONTROL = b"rules"
CONTROL_KEY = b"arbiter:rules"
_FIELDS = ("deployed_at", "digest", "document", "issuer", "principal", "version")


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
    at = deploy.deployed_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
    body = {"deployed_at": at, "digest": deploy.digest, "document": deploy.document, "issuer": deploy.issuer,
            "principal": deploy.principal, "version": deploy.version}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_control(value: bytes | None) -> Deploy:
    """Parse a control record's value; raise ``ControlInvalid`` naming what is wrong."""
    if value is None:
        raise ControlInvalid("the rules control record has no value")
    try:
        body = json.loads(bytes(value))
    except (ValueError, UnicodeDecodeError) as e:
        raise ControlInvalid(f"the rules control record is not JSON: {e}") from e
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
    try:
        when = datetime.fromisoformat(at) if isinstance(at, str) else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise ControlInvalid(f"deployed_at must be an RFC 3339 time with a zone, not {at!r}")
    return Deploy(version, digest, document, principal, when.astimezone(UTC), issuer)


def control_headers(signer: RecordSigner, value: bytes) -> list[tuple[str, bytes]]:
    """Return the headers of a control record: the control marker and the record signature."""
    return [(CONTROL_HEADER, RULES_CONTROL), *signer.headers(CONTROL_KEY, value)]
