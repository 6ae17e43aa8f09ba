"""Decide one object's records of a micro-batch in (partition, offset) order: the loop both backends share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import NamedTuple

from app.limits import size_limits
from app.settings import Settings
from app.signing import checker_for
from app.traces import trace_headers
from app.validator.decode import decode_record
from app.validator.outputs import OutputRecord, outcome_record, record_size, too_large
from app.validator.parking import park
from commands import Limits, ObjectState, Rejection, decide

__all__ = ["InputRecord", "OutputRecord", "fold", "limits_for"]


def limits_for(settings: Settings) -> Limits:
    """Return the domain limits: dedup TTL ``settings.dedup_ttl_ms``, the largest document ``app.limits`` allows.

    ``max_document_bytes`` is the largest payload whose event fits a record of ``settings.max_message_bytes``.
    """
    sizes = size_limits(settings.max_message_bytes)
    return Limits(dedup_ttl=timedelta(milliseconds=settings.dedup_ttl_ms), max_document_bytes=sizes.max_document_bytes,
                  max_id_bytes=sizes.max_id_bytes)


class InputRecord(NamedTuple):
    """One record of the commands topic as the source gives it.

    A named tuple, not a frozen dataclass: the shard step builds one per command, and a frozen dataclass's
    generated ``__init__`` (one ``object.__setattr__`` per field) cost several times a tuple's construction.
    """

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    signature: bytes | None = None  # the record's arbiter-signature header (app.signing)
    traceparent: bytes | None = None  # its W3C trace context (app.traces), copied onto its output
    tracestate: bytes | None = None


def fold(load: Callable[[], ObjectState | None], records: Iterable[InputRecord], settings: Settings,
         limits: Limits | None = None, *, ordered: bool = False,
         parked: list[OutputRecord] | None = None) -> tuple[list[OutputRecord], ObjectState | None, bool]:
    """Return (output records, new state, whether any command was accepted) for one key's records.

    Records are sorted by (partition, offset) first unless the caller says they are ``ordered``: Spark does
    not promise row order within a group. ``load`` is called once, at the first record that decodes: a
    record that does not decode into a command becomes a rejection and never touches the state.

    An output record over ``app.limits``' ``max_record_bytes`` becomes a ``TOO_LARGE`` rejection that fits
    (``outputs.too_large``), and its command changes nothing: one record never fails the micro-batch.

    A record that did not decode (``app.validator.parking``) also gives a parked copy of its whole bytes, appended
    to ``parked`` (both backends pass one; the outputs stay one per record). Without ``parked`` nothing is parked.
    """
    limits = limits or limits_for(settings)
    partitions = settings.partitions
    checker = checker_for(settings)
    sizes = size_limits(settings.max_message_bytes)
    bound, keep = sizes.max_record_bytes, sizes.keep_bytes
    out: list[OutputRecord] = []
    append = out.append
    changed = False
    loaded = False
    state: ObjectState | None = None
    for rec in records if ordered else sorted(records, key=_position):
        item, signed = decode_record(rec.key, rec.value, rec.topic, rec.partition, rec.offset, partitions=partitions,
                                     keep=keep, id_bytes=sizes.max_id_bytes, signature=rec.signature, checker=checker)
        trace = trace_headers(rec.traceparent, rec.tracestate) if rec.traceparent is not None else ()
        if isinstance(item, Rejection):
            if parked is not None:
                item, copy = park(item, rec.key, rec.value, rec.topic, rec.partition, rec.offset, rec.signature,
                                  settings, signed)
                if copy is not None:
                    parked.append(copy)
            output = outcome_record(item, settings, rec.partition, trace)
            if record_size(output) > bound:  # by construction it fits; kept as the one guarantee for every output
                output = too_large(item, record_size(output), sizes, settings, *rec[:5], trace)
            append(output)
            continue
        if not loaded:
            state, loaded = load(), True
        decision = decide(state, item, limits)
        output = outcome_record(decision.outcome, settings, rec.partition, trace)
        key = output[1]
        if len(output[2]) + (len(key) if key is not None else 0) > bound:  # record_size, inline: once per command
            output = too_large(decision.outcome, record_size(output), sizes, settings, *rec[:5], trace)  # state kept
        elif decision.accepted:
            changed = True
            state = decision.state
        append(output)
    return out, state, changed


def _position(rec: InputRecord) -> tuple[int, int]:
    return rec.partition, rec.offset
