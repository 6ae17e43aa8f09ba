"""The generation record: which commands topic, partition count and validator checkpoint are current.

``arbiter rescale`` (``app.rescale``) appends one to the generations topic at each step of a cut-over; the API and
the validator follow the last genuine one, and the audit projection chains them all (``arbiter audit show
arbiter:generation``). Canonical JSON under the key ``arbiter:generation``, signed in its own domain
(``app.signing.GENERATION_DOMAIN``); each names the digest of the one before it (``previous``), so a copy of an old
record is refused by the one fold every reader applies (``app.rescale.chain``). Records from before ``previous``
existed lack it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

#: The Kafka key of every generation record, and the id the audit trail indexes them under.
KEY = b"arbiter:generation"
_FIELDS = {"number", "topic", "partitions", "checkpoint", "paused", "at", "by"}  # and "previous" (absent in old ones)


def generation_topic(base: str, number: int) -> str:
    """Return the commands topic of generation ``number`` when generation 0's is ``base``: ``<base>.g<number>``."""
    return base if number == 0 else f"{base}.g{number}"


def generation_of(base: str, topic: str) -> int | None:
    """Return the generation whose commands topic ``topic`` is (``generation_topic``'s inverse); None for another.

    Readers that must know every generation without asking the generations topic (the archive's query, which
    discovers topics while it runs) recognise them by name.
    """
    if topic == base:
        return 0
    match = re.fullmatch(r"\.g([1-9][0-9]{0,8})", topic[len(base):]) if topic.startswith(base) else None
    return int(match.group(1)) if match else None


def generation_pattern(base: str) -> str:
    """Return a regular expression (Java's and Python's alike) matching every generation's commands topic of ``base``.

    A Kafka topic name is made of ``[a-zA-Z0-9._-]``: of those only ``.`` means something in a pattern.
    """
    return base.replace(".", r"\.") + r"(\.g[1-9][0-9]{0,8})?"


@dataclass(frozen=True)
class Generation:
    """One generation of the commands topic; ``paused`` while a rescale cuts over from it to the next."""

    number: int
    topic: str
    partitions: int
    checkpoint: str
    paused: bool = False
    at: str = ""
    by: str = ""
    previous: str = ""  # ``sha256:<hex>`` of the value of the record before this one ("" for the first)

    def dumps(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def parse(cls, raw: bytes) -> Generation:
        """Return the generation ``raw`` holds; raise ``ValueError`` (or ``KeyError``/``TypeError``) if it is none."""
        body = json.loads(raw)
        return cls(int(body["number"]), str(body["topic"]), int(body["partitions"]), str(body["checkpoint"]),
                   bool(body.get("paused", False)), str(body.get("at", "")), str(body.get("by", "")),
                   str(body.get("previous", "")))


def generation_record(value: bytes | None) -> Generation | None:
    """Return the generation ``value`` holds, or None if it is not a generation record."""
    if not value or value[:1] != b"{":
        return None
    try:
        body = json.loads(value)
        if not isinstance(body, dict) or set(body) - {"previous"} != _FIELDS:
            return None
        return Generation.parse(value)
    except (ValueError, KeyError, TypeError):
        return None
