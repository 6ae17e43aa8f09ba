"""Signatures of command records, so the principal of a command on the topic cannot be forged by other producers.

Arbiter's producers (the API, ``app.validator.topic_io``) add a Kafka header ``arbiter-signature: <kid>:<mac>``
to each command record: ``mac`` is base64url HMAC-SHA256, under the key ``kid`` of ``ARBITER_RECORD_KEYS``, over a
domain tag, the record's key (length-prefixed) and its value. The validator checks it (``app.validator.decode``)
and rejects an unsigned or mis-signed command as ``UNAUTHENTICATED`` unless ``ARBITER_ALLOW_UNSIGNED_COMMANDS``.
Keys rotate with overlap: add the new key, make it ``ARBITER_RECORD_KEY_ID`` (it signs), remove the old one once
no record signed with it is left to decide. Without ``ARBITER_RECORD_KEYS`` one key, ``derived``, is derived from
``ARBITER_AUTH_SECRET`` (which then stays on the driver: only the derived key goes to Spark tasks).

Each kind of record is signed in its own domain (the tag that starts the HMAC input), so a genuine record of one
kind never verifies as another: a user's command keyed ``arbiter:generation`` is no generation record, a deploy's
claim on the catalog is no control record on the commands topic, an API's claim of an Idempotency-Key
(``KEY_CLAIM_DOMAIN``, always checked, never legacy) is none of them. ``COMMAND_DOMAIN`` is the tag command records always had;
the control plane's (``CONTROL_DOMAIN``, ``CLAIM_DOMAIN``, ``PLACED_DOMAIN``, ``GENERATION_DOMAIN``) are ``-v2``: before
them those records were signed as commands (``LEGACY_DOMAIN``), which only the readers of the catalog and generations
topics still accept, and only for the records before the first one signed in the new domain
(docs/operations/upgrading.md). Control-plane records are always checked: ``ARBITER_ALLOW_UNSIGNED_COMMANDS``
concerns commands only (``control_checker_for``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from functools import lru_cache

from app.settings import Settings
from schemas.parked import ABSENT, INVALID, UNCHECKED, VALID

SIGNATURE_HEADER = "arbiter-signature"
MAX_KID_CHARS = 64  # app.limits.SIGNATURE_HEADER_BYTES counts on it
#: The signing domains: the tag is the first bytes the HMAC reads, so one kind's MAC is never another's.
COMMAND_DOMAIN = b"arbiter-command-record-v1\x00"
CONTROL_DOMAIN = b"arbiter-rules-control-v2\x00"  # a control record on the commands topic (app.rules.control)
CLAIM_DOMAIN = b"arbiter-rules-claim-v2\x00"  # a deploy's claim of a version on the catalog (app.rules.catalog)
PLACED_DOMAIN = b"arbiter-rules-placed-v2\x00"  # where a deploy's control records landed, on the catalog
GENERATION_DOMAIN = b"arbiter-generation-v2\x00"  # a generation record (app.rescale.generation)
KEY_CLAIM_DOMAIN = b"arbiter-key-claim-v1\x00"  # an API's claim of an Idempotency-Key (app.api.writes.claims)
MULTI_DOMAIN = b"arbiter-multi-object-v1\x00"  # the validator's protocol record between keys (app.validator.multi)
#: What the control plane's records were signed in before they had their own domains (the command domain).
LEGACY_DOMAIN = COMMAND_DOMAIN
DOMAINS = (COMMAND_DOMAIN, CONTROL_DOMAIN, CLAIM_DOMAIN, PLACED_DOMAIN, GENERATION_DOMAIN, KEY_CLAIM_DOMAIN,
           MULTI_DOMAIN)
_NO_KEY = b"\xff\xff\xff\xff"


class RecordSigner:
    """Sign records of one ``domain`` with the current key; check them against every key still trusted."""

    def __init__(self, keys: Mapping[str, bytes], current: str, domain: bytes = COMMAND_DOMAIN) -> None:
        if current not in keys:
            raise ValueError(f"record key id {current!r} is not one of {sorted(keys)}")
        if any(len(kid) > MAX_KID_CHARS or not kid.isascii() or ":" in kid for kid in keys):
            raise ValueError(f"record key ids must be ASCII, without ':', at most {MAX_KID_CHARS} characters")
        if domain not in DOMAINS:
            raise ValueError(f"unknown signing domain {domain!r}")
        self.domain = domain
        # Keyed once, with the domain tag already absorbed: each record copies this state rather than keying
        # a new HMAC (a third of the cost per record on the validator's hot path); the MAC is the same.
        self._keys = {kid.encode(): hmac.new(k, domain, hashlib.sha256) for kid, k in keys.items()}
        self._current = current.encode()

    def _mac(self, keyed: hmac.HMAC, key: bytes | None, value: bytes) -> bytes:
        h = keyed.copy()
        h.update(_NO_KEY if key is None else len(key).to_bytes(4, "big") + key)
        h.update(value)
        return base64.urlsafe_b64encode(h.digest()).rstrip(b"=")

    def sign(self, key: bytes | None, value: bytes) -> bytes:
        """Return the ``arbiter-signature`` header value of a record."""
        return self._current + b":" + self._mac(self._keys[self._current], key, value)

    def headers(self, key: bytes | None, value: bytes) -> list[tuple[str, bytes]]:
        """Return the Kafka headers to produce a command record with."""
        return [(SIGNATURE_HEADER, self.sign(key, value))]

    def problem(self, key: bytes | None, value: bytes, signature: bytes | None) -> str | None:
        """Return why the record's signature is not genuine, or None if it is."""
        if not signature:
            return f"the record has no {SIGNATURE_HEADER} header (not produced by Arbiter)"
        kid, colon, mac = bytes(signature).partition(b":")
        secret = self._keys.get(kid)
        if not colon or secret is None:
            return f"the record is signed with an unknown key {kid[:64]!r}"
        if not hmac.compare_digest(self._mac(secret, key, value), mac):
            return f"the record's signature (key {kid.decode(errors='replace')!r}) does not match its key and value"
        return None

    def verdict(self, key: bytes | None, value: bytes | None, signature: bytes | None) -> tuple[str, str | None]:
        """Return (``valid``, None), (``absent``, why) or (``invalid``, why) for a record's signature."""
        problem = self.problem(key, value, signature) if value is not None else \
            f"the record has no value, so its {SIGNATURE_HEADER} header cannot match it"
        if problem is None:
            return VALID, None
        return (ABSENT if not signature else INVALID), problem


def verdict(checker: RecordSigner | None, key: bytes | None, value: bytes | None,
            signature: bytes | None) -> tuple[str, str | None]:
    """``RecordSigner.verdict``, or (``absent``/``unchecked``, None) without a checker (unsigned producers allowed)."""
    if checker is None:
        return (ABSENT if not signature else UNCHECKED), None
    return checker.verdict(key, value, signature)


def signer_for(settings: Settings, domain: bytes = COMMAND_DOMAIN) -> RecordSigner:
    """Return the signer of ``settings`` for records of ``domain`` (cached per key set and domain)."""
    keys = {kid: secret.encode("utf-8") for kid, secret in settings.record_secrets().items()}
    current = settings.record_key_id or (next(iter(keys)) if len(keys) == 1 else "")
    if not current:
        raise ValueError("ARBITER_RECORD_KEYS holds several keys: name the one that signs in ARBITER_RECORD_KEY_ID")
    return _signer(tuple(sorted(keys.items())), current, domain)


@lru_cache(maxsize=32)
def _signer(keys: tuple[tuple[str, bytes], ...], current: str, domain: bytes) -> RecordSigner:
    return RecordSigner(dict(keys), current, domain)


def control_checker_for(settings: Settings, domain: bytes) -> RecordSigner:
    """Return what checks control-plane records of ``domain``: always a signer, whatever
    ``ARBITER_ALLOW_UNSIGNED_COMMANDS`` says (an unsigned control record is never accepted)."""
    if domain == COMMAND_DOMAIN:
        raise ValueError("command records are checked by checker_for")
    return signer_for(settings, domain)


def signature_of(headers: Iterable[tuple[str, bytes | None]]) -> bytes | None:
    """Return a record's ``arbiter-signature`` header value (the first), or None."""
    return next((bytes(v) for k, v in headers if k == SIGNATURE_HEADER and v is not None), None)


_checkers: dict[int, tuple[Settings, RecordSigner | None]] = {}


def checker_for(settings: Settings) -> RecordSigner | None:
    """Return what checks command records in the validator, or None if unsigned producers are allowed.

    Cached per settings object (the validator asks once per key of each micro-batch); the entry holds the
    settings, so their id is not reused while it is cached.
    """
    cached = _checkers.get(id(settings))
    if cached is None or cached[0] is not settings:
        if len(_checkers) > 64:
            _checkers.clear()
        cached = _checkers[id(settings)] = (settings, None if settings.allow_unsigned_commands
                                            else signer_for(settings))
    return cached[1]
