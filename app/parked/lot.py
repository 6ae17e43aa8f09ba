"""Read the parked topic and its log; redrive a parked record to the commands topic, or discard it, with a log record.

Every redrive and discard is first written to the parked-log topic (one JSON record, keyed by the parked record's
origin), which the audit projection chains like the decisions; then a redrive produces its command. A redrive
whose command was lost after the log record is redone by running it again: the command id is the same.

A redrive of the parked bytes keeps their command id: they may be a copy of a command decided long ago (a verbatim
copy written to a closed generation is parked as genuine), and under its own id the validator answers it
``DUPLICATE`` within its dedup window (``ARBITER_DEDUP_TTL_MS``) rather than deciding it again (issue 47). A value
the operator supplies is a new command: it gets an id derived from the parked record's origin.

A redrive signs its command with the current record key, so it would turn a forged record into a genuine one: the
parked bytes are redriven only when their signature was genuine (``signature_state``: what the validator found,
kept in the envelope; an envelope from before that was recorded is checked against the keys trusted now).
Anything else is redriven only with a value the operator supplies (``--value-file``), and the log record says so.
"""

from __future__ import annotations

import getpass
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from app.errors import BrokerUnavailable
from app.settings import Settings
from app.signing import RecordSigner, signer_for, verdict
from app.validator.topic_io import Record, producer, read_all
from commands.errors import ArbiterError
from commands.ids import redrive_command_id
from schemas import codec, parked
from schemas.codec import DecodeError

ACTIONS = ("redrive", "discard")
_DONE = {"redrive": "redriven", "discard": "discarded"}


class ParkedNotFound(ArbiterError):
    """No parked record comes from the given coordinates."""

    code = "PARKED_NOT_FOUND"


class ParkedNotRedrivable(ArbiterError):
    """The bytes to redrive do not decode into a command (fix them with --value-file), or it was already handled."""

    code = "PARKED_NOT_REDRIVABLE"


class ParkedNotGenuine(ArbiterError):
    """The parked record's signature did not verify: its bytes are redriven only as a value the operator supplies."""

    code = "PARKED_NOT_GENUINE"


def signature_state(p: parked.Parked, checker: RecordSigner | None) -> str:
    """Return ``valid``, ``invalid`` or ``absent`` for a parked record: what the validator recorded, or (an envelope
    from before it was recorded, or one parked while unsigned producers were allowed) the check made now."""
    if p.signature_state != parked.UNCHECKED:
        return p.signature_state
    state, _ = verdict(checker, p.key, p.value, p.signature)
    return parked.INVALID if state == parked.UNCHECKED else state


@dataclass
class ParkedEntry:
    """One parked record (the first copy: a replayed batch may have written an identical second), and its fate."""

    record: parked.Parked
    at: tuple[int, int]                      # (partition, offset) on the parked topic
    copies: int = 1
    actions: list[dict[str, Any]] = field(default_factory=list)
    key_bytes: int | None = None             # sizes of the original key and value (kept when the bytes are not)
    value_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.key_bytes is None and self.record.key is not None:
            self.key_bytes = len(self.record.key)
        if self.value_bytes is None and self.record.value is not None:
            self.value_bytes = len(self.record.value)

    @property
    def status(self) -> str:
        return _DONE.get(self.actions[-1].get("action"), "logged") if self.actions else "parked"

    def summary(self) -> dict[str, Any]:
        p = self.record
        return {"origin": p.where, "reason": p.reason, "rejection_id": p.rejection_id, "status": self.status,
                "parked_at": f"[{self.at[0]}]@{self.at[1]}", "key_bytes": self.key_bytes,
                "value_bytes": self.value_bytes, "copies": self.copies, "actions": self.actions}


class Ledger:
    """The parking lot folded from the parked topic and its log, in any interleaving of the two.

    ``keep_bytes=False`` keeps each record's coordinates, reason and sizes but not its bytes (the status page).
    """

    def __init__(self, *, keep_bytes: bool = True) -> None:
        self.keep_bytes = keep_bytes
        self.entries: dict[str, ParkedEntry] = {}       # by origin, in the order first seen
        self._actions: dict[str, list[dict[str, Any]]] = {}

    def add_parked(self, partition: int, offset: int, value: bytes | None) -> None:
        try:
            p = parked.decode(value or b"")
        except parked.ParkedFormatError:
            return  # not written by the validator; the parking lot has nothing to do with it
        seen = self.entries.get(p.where)
        if seen is not None:
            seen.copies += 1
            return
        sizes = (None if p.key is None else len(p.key), None if p.value is None else len(p.value))
        if not self.keep_bytes:
            p = replace(p, key=None, signature=None, value=None)
        self.entries[p.where] = ParkedEntry(p, (partition, offset), actions=self._actions.setdefault(p.where, []),
                                            key_bytes=sizes[0], value_bytes=sizes[1])

    def add_action(self, value: bytes | None) -> None:
        try:
            action = json.loads(value or b"")
            origin = action["origin"]
        except (ValueError, KeyError, TypeError):
            return
        if isinstance(origin, str):
            self._actions.setdefault(origin, []).append(action)

    def counts(self) -> dict[str, int]:
        """Return how many parked records are parked (untouched), redriven and discarded."""
        out = dict.fromkeys(("parked", "redriven", "discarded"), 0)
        for e in self.entries.values():
            out[e.status] = out.get(e.status, 0) + 1
        return out


def origin_of(where: str) -> tuple[str, int, int]:
    """Parse ``topic[partition]@offset``."""
    try:
        head, offset = where.rsplit("@", 1)
        topic, partition = head[:-1].rsplit("[", 1)
        return topic, int(partition), int(offset)
    except ValueError as e:
        raise ParkedNotFound(f"{where!r} is not topic[partition]@offset") from e


def entries(settings: Settings) -> list[ParkedEntry]:
    """Return every parked record, oldest first per partition, with the redrives and discards logged for it."""
    ledger = Ledger()
    for rec in read_all(settings, settings.parked_topic):
        ledger.add_parked(rec.partition, rec.offset, rec.value)
    for rec in read_all(settings, settings.parked_log_topic):
        ledger.add_action(rec.value)
    return list(ledger.entries.values())


def find(settings: Settings, where: str) -> ParkedEntry:
    """Return the parked record from ``where`` (``topic[partition]@offset`` on the commands topic)."""
    topic, partition, offset = origin_of(where)
    for e in entries(settings):
        if (e.record.topic, e.record.partition, e.record.offset) == (topic, partition, offset):
            return e
    raise ParkedNotFound(f"nothing is parked from {where} in {settings.parked_topic}")


def redrive_record(entry: ParkedEntry, value: bytes | None, checker: RecordSigner | None) -> tuple[bytes, bytes, str]:
    """Return (key, value, command id) of the command a redrive of ``entry`` produces: the parked bytes, decoded,
    under their own command id, or ``value`` (the operator's fix) with the command id derived from the parked
    record's origin.

    The parked bytes themselves only if their signature is genuine (``signature_state`` under ``checker``, the keys
    trusted now): else ``ParkedNotGenuine``, since the redrive signs what it sends.
    """
    p = entry.record
    if value is None and (state := signature_state(p, checker)) != parked.VALID:
        raise ParkedNotGenuine(f"{p.where}: the parked record's signature is {state}, so its bytes may not come from "
                               "Arbiter (a redrive would sign them as genuine); write the command you mean to send "
                               "and pass it with --value-file; nothing was redriven")
    data = p.value if value is None else value
    try:
        command = codec.decode_command(data or b"")
    except DecodeError as e:
        raise ParkedNotRedrivable(f"{p.where}: the {'fixed' if value is not None else 'parked'} bytes do not decode "
                                  f"into a command ({e}); write a fixed record value and pass --value-file") from e
    if value is not None:  # the operator's command: one id per parked record, whatever fix was made in between
        command = replace(command, command_id=redrive_command_id(p.topic, p.partition, p.offset))
    return command.object_id.encode("utf-8"), codec.encode_command(command), command.command_id


def _log(settings: Settings, entry: ParkedEntry, action: str, operator: str | None, note: str,
         extra: dict[str, Any]) -> dict[str, Any]:
    p = entry.record
    record = {"action": action, "origin": p.where, "rejection_id": p.rejection_id, "reason": p.reason,
              "parked_at": {"topic": settings.parked_topic, "partition": entry.at[0], "offset": entry.at[1]},
              "operator": operator or getpass.getuser(), "note": note,
              "at": datetime.now(UTC).isoformat(timespec="microseconds"), **extra}
    _send(settings, settings.parked_log_topic, p.where.encode(), json.dumps(record, sort_keys=True).encode(),
          p.partition % max(1, settings.partitions), ())
    return record


def _send(settings: Settings, topic: str, key: bytes, value: bytes, partition: int | None,
          headers: list[tuple[str, bytes]] | tuple[()]) -> None:
    errors: list[str] = []
    prod = producer(settings, **{"message.max.bytes": str(settings.max_message_bytes)})
    kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
    prod.produce(topic, value=value, key=key, headers=list(headers),
                 on_delivery=lambda err, _msg: errors.append(str(err)) if err is not None else None, **kwargs)
    if prod.flush(60) != 0 or errors:
        raise BrokerUnavailable(f"producing to {topic} failed: {errors[:3] or 'flush timed out'}")


def redrive(settings: Settings, where: str, value: bytes | None = None, *, operator: str | None = None,
            note: str = "", again: bool = False) -> dict[str, Any]:
    """Log, then produce the command of the parked record from ``where``; return the log record.

    A record already redriven or discarded is refused unless ``again``: a second redrive carries the same
    command id, so the validator answers it ``DUPLICATE`` within its dedup window (``ARBITER_DEDUP_TTL_MS``).
    """
    entry = find(settings, where)
    if entry.actions and not again:
        raise ParkedNotRedrivable(f"{where} was already {entry.status} ({entry.actions[-1]['at']}); pass --again to "
                                  "redrive it once more (same command id: the validator answers DUPLICATE)")
    checker = signer_for(settings)
    key, data, command_id = redrive_record(entry, value, checker)
    record = _log(settings, entry, "redrive", operator, note,
                  {"command_id": command_id, "object_id": key.decode("utf-8"), "fixed": value is not None,
                   "signature": signature_state(entry.record, checker)})
    from app.rescale.generation import current_generation_settings

    topic = current_generation_settings(settings).topic_commands  # the current generation's (app.rescale)
    _send(settings, topic, key, data, None, checker.headers(key, data))
    return record


def discard(settings: Settings, where: str, *, operator: str | None = None, note: str = "") -> dict[str, Any]:
    """Log that the parked record from ``where`` is given up; return the log record (the bytes stay on the topic)."""
    entry = find(settings, where)
    if entry.actions:
        raise ParkedNotRedrivable(f"{where} was already {entry.status} ({entry.actions[-1]['at']})")
    return _log(settings, entry, "discard", operator, note, {})


__all__ = ["ACTIONS", "Ledger", "ParkedEntry", "ParkedNotFound", "ParkedNotGenuine", "ParkedNotRedrivable", "Record",
           "discard", "entries", "find", "origin_of", "redrive", "redrive_record", "signature_state"]
