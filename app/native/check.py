"""A deterministic corpus through the codec and ``decide``, reduced to one digest of every byte written.

``app.native.build`` runs it under a fresh mypyc build and under the pure sources and installs the build only if
the digests are equal; ``tests/unit/test_native.py`` does the same. The corpus is what the validator sees:
creates, updates, deletes, editor grants and revokes, resends (DUPLICATE while remembered, decided afresh
once expired), wrong versions and principals, bad and oversized payloads, escaped lone surrogates, full
dedup windows under three sets of limits, and records that do not decode at all.
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
import random
import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from commands import (
    DEFAULT_LIMITS,
    Command,
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    GrantReader,
    Limits,
    ObjectState,
    OriginalRecord,
    ReasonCode,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    decide,
    keep_original,
    reject_record,
)
from commands.rules import compile_rules
from schemas import codec
from schemas.catalog import SchemaCatalog, SchemaVersion

T0 = datetime(2025, 1, 1, tzinfo=UTC)
PRINCIPALS = ("alice", "bob", "carol", "dave")
LIMITS = (DEFAULT_LIMITS, Limits(max_editors=2, max_recent=4, max_document_bytes=300, dedup_ttl=timedelta(hours=1)),
          Limits(dedup_ttl=None))
DOCUMENTS = ('{"title": "first"}', '{"a": [1, 2, {"b": null}], "ü": "ö€😀"}', "[]", "not json", '{"a": 1',
             '{"x": "\\ud800"}', '{"x": "\\u00e9\\ud83d\\ude00"}', '{"pad": "' + "x" * 400 + '"}', "", " {}",
             '{"n": NaN}', '{"n": 1e400}', '{"d":' + "[" * 40 + "]" * 40 + "}")
EDITORS = ("bob", "carol", "dave", "erin", "alice", "")
STEPS = (0, 1, 1, 7, 60, 300) * 80 + (3601,) * 4 + (90_000,)  # seconds; the last two outlive the dedup TTLs
# The team's rules (commands.rules): every object whose index is a multiple of 3 is an "order"; every command is
# decided under this rule set, so the corpus covers RULE_VIOLATED, RULE_ERROR and the rules version on each output.
RULES = compile_rules(json.dumps({"rules": 1, "types": {"order": {
    "create_schema": {"type": "object", "required": ["status"], "properties": {"status": {"const": "draft"}}},
    "patch_schema": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3000}}},
    "tracked": {"status": "/status", "amount": "/amount", "who": "/who"},
    "transitions": [{"name": "flow", "field": "status", "initial": ["draft"],
                     "allowed": {"draft": ["submitted"], "submitted": ["approved", "rejected"], "approved": [],
                                 "rejected": []}}],
    "guards": [{"name": "big", "expr": "next.status != 'approved' || next.amount < 100", "message": "too big"},
               {"name": "who", "expr": "next.who == state.who || !state.exists", "message": "who stays",
                "kinds": ["update", "delete"]}]}}}), version=3)
ORDER_PATCHES = ('{"status": "submitted"}', '{"status": "approved"}', '{"status": "rejected"}', '{"status": "draft"}',
                 '{"amount": 50}', '{"amount": 500}', '{"amount": "x"}', '{"who": "w"}', '{"n": 5000}')
MODULES = ("commands.decide", "commands.state", "commands.json_text", "schemas.codec", "schemas.compiled",
           "schemas.records")


def _fastavro_codec() -> codec.Codec:
    """Return a codec whose schemas differ from the hand-compiled ones only in a doc: fastavro + records."""
    versions = [SchemaVersion(v.subject, v.version, v.schema_id, {**v.schema, "doc": "via fastavro"})
                for v in SchemaCatalog.repository().versions()]
    return codec.Codec(SchemaCatalog(versions))


def _command(rng: random.Random, i: int, object_id: str, owner: str, at: datetime, state: ObjectState | None) -> Command:
    command_id = f"c{i}" if rng.random() > 0.01 else ""
    principal = owner if rng.random() < 0.8 else rng.choice(PRINCIPALS)
    current = state.version if state is not None else 0
    expected = rng.choice((None, None, current, current, current + 1, current - 1))
    kind = rng.random()
    typed = object_id.endswith(("0", "3", "6", "9"))
    if kind < 0.15:
        if typed:
            return CreateObject(command_id, object_id, principal, at, expected, object_type="order", document=rng.choice(
                ('{"status": "draft", "amount": 5, "who": "v"}', '{"status": "draft"}', '{"status": "x"}', "{}")))
        return CreateObject(command_id, object_id, principal, at, expected, document=rng.choice(DOCUMENTS))
    if kind < 0.6:
        patch = rng.choice(DOCUMENTS) if rng.random() < 0.3 else f'{{"n": {i}, "s": "{"é" * (i % 5)}"}}'
        if typed and rng.random() < 0.7:
            patch = rng.choice(ORDER_PATCHES)
        return UpdateObject(command_id, object_id, principal, at, expected, patch=patch)
    if kind < 0.605:
        return DeleteObject(command_id, object_id, principal, at, expected)
    if kind < 0.75:
        return GrantEditor(command_id, object_id, principal, at, expected, editor=rng.choice(EDITORS))
    if kind < 0.8:
        return RevokeEditor(command_id, object_id, principal, at, expected, editor=rng.choice(EDITORS))
    if kind < 0.93:
        return GrantReader(command_id, object_id, principal, at, expected, reader=rng.choice(EDITORS))
    return RevokeReader(command_id, object_id, principal, at, expected, reader=rng.choice(EDITORS))


def _damage(rng: random.Random, value: bytes) -> bytes | None:
    """Return ``value`` made undecodable in one of the ways a topic can hold."""
    way = rng.randrange(8)
    if way == 0:
        return None
    if way == 1:
        return value[:rng.randrange(len(value))]
    if way == 2:
        return b"\x01" + value[1:]  # magic byte
    if way == 3:
        return b"\x00\x00\x00\x27\x0f" + value[5:]  # unknown schema id
    if way == 4:
        return codec.default_codec.catalog.latest("arbiter.Event").schema_id.to_bytes(5, "big") + value[5:]
    if way == 5:
        return value + b"\x00"
    if way == 6 and b"ZZZ" in value:
        return value.replace(b"ZZZ", b"\xed\xa0\x80", 1)  # a UTF-8-encoded lone surrogate: not UTF-8
    data = bytearray(value)
    data[rng.randrange(5, len(data))] ^= 0xFF
    return bytes(data)


def run(seed: int = 7, count: int = 4000, objects: int = 40) -> tuple[str, Counter[str]]:
    """Return the sha256 of every output for ``count`` commands, and how many of each outcome there were."""
    rng = random.Random(seed)  # noqa: S311  (a reproducible corpus, no secret)
    slow = _fastavro_codec()
    h = hashlib.sha256()
    seen: Counter[str] = Counter()
    ids = [f"obj-{n}" for n in range(objects)] + ["ünï-ø", ""]
    states: dict[str, bytes] = {}
    sent: list[Command] = []
    at = T0
    for i in range(count):
        at += timedelta(seconds=rng.choice(STEPS))
        object_id = rng.choice(ids)
        limits = LIMITS[ids.index(object_id) % 3]
        old = states.get(object_id)
        state = codec.decode_state(old) if old is not None else None
        if sent and rng.random() < 0.08:  # a resend, as it was or re-stamped by a retrying client
            cmd = rng.choice(sent[-60:])
            cmd = cmd if rng.random() < 0.5 else replace(cmd, issued_at=at)
            if rng.random() < 0.25:  # the key reused by another principal, or for another request
                cmd = replace(cmd, principal=rng.choice(PRINCIPALS)) if rng.random() < 0.5 else UpdateObject(
                    cmd.command_id, cmd.object_id, cmd.principal, at, None, patch=f'{{"reused": {i}}}')
            object_id = cmd.object_id
            limits = LIMITS[ids.index(object_id) % 3]
            old = states.get(object_id)
            state = codec.decode_state(old) if old is not None else None
        else:
            cmd = _command(rng, i, object_id, PRINCIPALS[ids.index(object_id) % 4], at, state)
            if rng.random() < 0.02:
                cmd = CreateObject(cmd.command_id, object_id, cmd.principal, at, None, document='{"k": "ZZZ"}')
            sent.append(cmd)
        value = codec.encode_command(cmd)
        h.update(value)
        original = OriginalRecord("commands", i % 4, i, object_id.encode(), value)
        if rng.random() < 0.05:
            damaged = _damage(rng, value)
            try:
                if damaged is None:
                    raise codec.DecodeError("record has no value", ReasonCode.MALFORMED)
                cmd = codec.decode_command(damaged)
            except codec.DecodeError as e:
                original = keep_original("commands", i % 4, i, object_id.encode(), damaged, keep=rng.choice((8, 4096)))
                rejection = reject_record(original, e.reason, str(e), object_id=object_id)
                h.update(codec.encode_rejection(rejection))
                seen[f"undecodable {e.reason.value}"] += 1
                continue
        else:
            cmd = codec.decode_command(value)
        decision = decide(state, cmd, limits, RULES)
        out = codec.encode_outcome(decision.outcome)
        h.update(out)
        outcome = decision.outcome
        seen[outcome.type.value if isinstance(outcome, Event) else outcome.reason.value] += 1
        if decision.state is not None and decision.state is not state:
            states[object_id] = new = codec.encode_state(decision.state)
            h.update(new)
            seen[f"recent {len(decision.state.recent)}"] += 1
        if i % 8 == 0:  # the fastavro and records path, both ways
            back = slow.decode_outcome(out)
            h.update(repr(back).encode("utf-8", "surrogatepass"))
            h.update(slow.encode_outcome(back))
            if decision.state is not None:
                h.update(slow.encode_state(slow.decode_state(codec.encode_state(decision.state))))
        if i % 500 == 0:
            _survive_pickle_and_copy([cmd, decision, decision.outcome, limits, original, RULES])
            seen["pickled"] += 1
    return h.hexdigest(), seen


def _survive_pickle_and_copy(values: list[Any]) -> None:
    """Raise unless each value comes back equal from pickle, copy and deepcopy (Spark pickles what it ships)."""
    for value in values:
        for back in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):  # noqa: S301
            if back != value or type(back) is not type(value):
                raise RuntimeError(f"{type(value).__name__} does not survive pickle or copy: {back!r} != {value!r}")


def report() -> dict[str, Any]:
    """Return the corpus digest, outcome counts and the files the domain modules were loaded from."""
    digest, seen = run()
    return {"digest": digest, "outcomes": dict(seen), "files": {m: sys.modules[m].__file__ for m in MODULES}}
