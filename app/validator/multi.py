"""Decisions that span objects in the validator: protocol records on ``commands`` and one key's fold over them.

A protocol record (``commands.unique``'s ``Claim``, ``Answer`` or ``Release``) is written by the validator to the
``commands`` topic, keyed by the key it is addressed to, at murmur2(key) mod the partition count, with the header
``arbiter-control: multi`` and a signature in its own domain (``app.signing.MULTI_DOMAIN``): a record that claims
to be one and is not signed so is refused ``UNAUTHENTICATED`` and changes nothing. ``fold_multi`` is ``fold`` for a
batch with multi-object work: every command goes through ``commands.unique.home_step`` (``decide``, and a hold
where a unique value is claimed), every protocol record through ``index_step`` or ``answer_step``
(docs/concepts/multi-object.md). Everything it writes is a function of its inputs, so a re-run writes the same.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.limits import MESSAGE_CHARS, size_limits
from app.rules.control import CONTROL_HEADER
from app.settings import Settings
from app.signing import MULTI_DOMAIN, SIGNATURE_HEADER, RecordSigner, checker_for, control_checker_for
from app.traces import trace_headers
from app.validator.decode import decode_record
from app.validator.fold import InputRecord
from app.validator.headers import Headers
from app.validator.murmur2 import partition_for
from app.validator.outputs import OutputRecord, outcome_record, record_size, too_large
from app.validator.parking import park
from app.validator.rules import NO_RULES, ShardRules, unknown_version
from commands import Limits, ObjectState, ReasonCode, Rejection, decide, keep_original, reject_record
from commands.rejection import clip
from commands.rules import RuleSet
from commands.unique import (
    Answer,
    Hold,
    Message,
    MessageInvalid,
    answer_step,
    decode_message,
    encode_message,
    home_step,
    index_step,
    message_key,
    uniques_of,
)
from schemas import codec

#: The ``arbiter-control`` header value of a protocol record.
MULTI_CONTROL = b"multi"


def is_multi(control: bytes | None) -> bool:
    """Return whether a record's ``arbiter-control`` header marks it as a protocol record."""
    return control is not None and bytes(control) == MULTI_CONTROL


def _signer(settings: Settings) -> RecordSigner:
    return control_checker_for(settings, MULTI_DOMAIN)  # built once per key set (app.signing)


def message_headers(settings: Settings, key: bytes, value: bytes) -> Headers:
    """Return a protocol record's headers: the control marker and its signature (HMAC: the same bytes each time)."""
    return (CONTROL_HEADER, MULTI_CONTROL), (SIGNATURE_HEADER, _signer(settings).sign(key, value))


def message_record(message: Message, settings: Settings) -> OutputRecord:
    """Return the record that carries ``message`` to its key's partition of the commands topic."""
    key = message_key(message).encode("utf-8")
    value = encode_message(message)
    return settings.topic_commands, key, value, partition_for(key, settings.partitions), \
        message_headers(settings, key, value)


def uses_multi(rules: ShardRules, versions: Iterable[int | None]) -> bool:
    """Return whether any of the rules ``versions`` (of a batch's commands) declares a unique field."""
    for version in set(versions):
        try:
            if uniques_of(rules.ruleset(version)):
                return True
        except KeyError:
            continue
    return False


def encode_holds(holds: dict[str, Hold]) -> bytes:
    """Return a shard's holds as canonical JSON bytes (the same bytes for the same holds)."""
    body = {k: {"answers": [encode_message(a).decode() for a in h.answers], "claims": [list(c) for c in h.claims],
                "command": base64.b64encode(codec.encode_command(h.command)).decode(), "decision": h.decision,
                "rules_version": h.rules_version} for k, h in holds.items()}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_holds(raw: bytes | None) -> dict[str, Hold]:
    """Return the holds ``encode_holds`` stored ({} for None)."""
    if raw is None:
        return {}
    holds: dict[str, Hold] = {}
    for key, h in json.loads(bytes(raw)).items():
        answers = tuple(decode_message(a.encode()) for a in h["answers"])
        holds[key] = Hold(h["decision"], codec.decode_command(base64.b64decode(h["command"])), h["rules_version"],
                          tuple((i, f) for i, f in h["claims"]), tuple(a for a in answers if isinstance(a, Answer)))
    return holds


@dataclass(frozen=True, slots=True)
class MultiFold:
    """What ``fold_multi`` did to one key: one output per record (None: none yet), the protocol records it sends,
    its state (and whether it changed), its hold (and whether it did)."""

    outputs: list[OutputRecord | None]
    sent: list[OutputRecord]
    state: ObjectState | None
    changed: bool
    hold: Hold | None
    hold_changed: bool


def _refuse(rec: InputRecord, reason: ReasonCode, why: str, keep: int) -> Rejection:
    original = keep_original(rec.topic, rec.partition, rec.offset, rec.key, rec.value, keep)
    return reject_record(original, reason, clip(f"{rec.topic}[{rec.partition}]@{rec.offset}: protocol record "
                                                f"refused, nothing changed: {why}", MESSAGE_CHARS))


def read_message(rec: InputRecord, settings: Settings, keep: int) -> Message | Rejection:
    """Return the message of a protocol record, or the rejection of one not signed as such or malformed."""
    problem = _signer(settings).problem(rec.key, rec.value or b"", rec.signature)
    if problem is not None:
        return _refuse(rec, ReasonCode.UNAUTHENTICATED, problem, keep)
    try:
        message = decode_message(rec.value)
    except MessageInvalid as e:
        return _refuse(rec, ReasonCode.MALFORMED, e.message, keep)
    if rec.key is None or message_key(message).encode("utf-8") != bytes(rec.key):
        return _refuse(rec, ReasonCode.MALFORMED, "its key is not the key its message is addressed to", keep)
    return message


def fold_multi(load: Callable[[], ObjectState | None], hold: Hold | None, records: Iterable[InputRecord],
               settings: Settings, limits: Limits, rules: ShardRules | None, parked: list[OutputRecord]) -> MultiFold:
    """Decide one key's records of a batch (offset order) with its hold; ``fold``'s checks for every command."""
    rules = rules or NO_RULES
    sizes = size_limits(settings.max_message_bytes)
    checker = checker_for(settings)
    out: list[OutputRecord | None] = []
    messages: list[OutputRecord] = []
    state: ObjectState | None = None
    loaded = changed = hold_changed = False
    for rec in records:
        trace = trace_headers(rec.traceparent, rec.tracestate) if rec.traceparent is not None else ()
        if not loaded:
            state, loaded = load(), True
        if is_multi(rec.control):
            message = read_message(rec, settings, sizes.keep_bytes)
            if isinstance(message, Rejection):
                out.append(outcome_record(message, settings, rec.partition, trace))
                continue
            if isinstance(message, Answer):
                # A hold's outcome is decided under its command's version; a stray answer under the one in force.
                ruleset = _ruleset(rules, hold.rules_version if hold is not None else rec.rules)
                result = answer_step(state, hold, message, uniques_of(ruleset), limits, ruleset)
                outcome, new_state, new_hold, sent = result.outcome, result.state, result.hold, result.messages
            else:
                step = index_step(state, message)
                outcome, new_state, new_hold, sent = None, step.entry, hold, step.messages
            out.append(None if outcome is None else outcome_record(outcome, settings, rec.partition, trace))
        else:
            item, signed = decode_record(rec.key, rec.value, rec.topic, rec.partition, rec.offset,
                                         partitions=settings.partitions, keep=sizes.keep_bytes,
                                         id_bytes=sizes.max_id_bytes, signature=rec.signature, checker=checker)
            if isinstance(item, Rejection):
                item, copy = park(item, rec.key, rec.value, rec.topic, rec.partition, rec.offset, rec.signature,
                                  settings, signed)
                if copy is not None:
                    parked.append(copy)
                out.append(outcome_record(item, settings, rec.partition, trace))
                continue
            try:
                ruleset = _ruleset(rules, rec.rules)
            except KeyError:
                out.append(outcome_record(unknown_version(item, rec.rules or 0, state), settings, rec.partition,
                                          trace))
                continue
            home = home_step(state, hold, item, uniques_of(ruleset), limits, ruleset)
            outcome, new_state, new_hold, sent = home.outcome, home.state, home.hold, home.messages
            if new_hold is not None and hold is None:
                # The event it waits to write must fit a record, or it is refused now, before anything is claimed.
                would = decide(state, item, limits, ruleset).outcome
                record = outcome_record(would, settings, rec.partition, trace)
                if record_size(record) > sizes.max_record_bytes:
                    out.append(too_large(would, record_size(record), sizes, settings, *rec[:5], trace))
                    continue
            if outcome is None:
                out.append(None)
            else:
                record = outcome_record(outcome, settings, rec.partition, trace)
                if record_size(record) > sizes.max_record_bytes:
                    out.append(too_large(outcome, record_size(record), sizes, settings, *rec[:5], trace))
                    continue  # nothing changes, nothing is sent
                out.append(record)
        if new_state is not state:
            state, changed = new_state, True
        if new_hold is not hold:
            hold, hold_changed = new_hold, True
        messages.extend(message_record(m, settings) for m in sent)
    return MultiFold(out, messages, state, changed, hold, hold_changed)


def _ruleset(rules: ShardRules, version: int | None) -> RuleSet | None:
    return rules.ruleset(version)

