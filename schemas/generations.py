"""The generation record: which commands topic, partition count and validator checkpoint are current.

``arbiter rescale`` (``app.rescale``) appends one to the generations topic at each step of a cut-over; the API and
the validator follow the last genuine one, and the audit projection chains them all (``arbiter audit show
arbiter:generation``). Canonical JSON under the key ``arbiter:generation``, signed like a command record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

#: The Kafka key of every generation record, and the id the audit trail indexes them under.
KEY = b"arbiter:generation"


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

    def dumps(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def parse(cls, raw: bytes) -> Generation:
        """Return the generation ``raw`` holds; raise ``ValueError`` (or ``KeyError``/``TypeError``) if it is none."""
        body = json.loads(raw)
        return cls(int(body["number"]), str(body["topic"]), int(body["partitions"]), str(body["checkpoint"]),
                   bool(body.get("paused", False)), str(body.get("at", "")), str(body.get("by", "")))


def generation_record(value: bytes | None) -> Generation | None:
    """Return the generation ``value`` holds, or None if it is not a generation record."""
    if not value or value[:1] != b"{":
        return None
    try:
        body = json.loads(value)
        if not isinstance(body, dict) or set(body) != {"number", "topic", "partitions", "checkpoint", "paused", "at",
                                                       "by"}:
            return None
        return Generation.parse(value)
    except (ValueError, KeyError, TypeError):
        return None
