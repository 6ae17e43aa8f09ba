"""Command streams run through a shard twice, by the Python fold and through the compiled core: every byte compared.

``app.native.core_build`` runs ``report`` under a fresh build and installs it only when nothing differs;
``tests/unit/test_core_differential.py`` draws its streams with Hypothesis from the same pools (``Step``). A stream
covers every generic reason code, the id, payload and grant limits at the boundary and one past, the dedup window
(duplicates, reused keys, expiry), deletes and tombstone expiry, groups, and the records the core hands back:
unsigned, mis-signed, undecodable, keyless, misaddressed and traced ones. Typed steps (``Step.typed``) run under the
two documents of ``TYPED_RULES``, deployed mid-stream (``Step.deploy``): every reason a rule gives (unknown types,
transitions from null and between states, the tracked bound at the limit and one past, rules in warn and audit
mode), and what the core hands back (guards, schema errors, integers past 64 bits).
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from app.limits import size_limits
from app.rules.control import CONTROL_KEY, RULES_CONTROL, Deploy, encode_control
from app.settings import Settings
from app.signing import CONTROL_DOMAIN, signer_for
from app.validator.fold import InputRecord
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import open_shard, shard_dir
from commands import CreateObject, DeleteObject, GrantEditor, GrantReader, RevokeEditor, RevokeReader, UpdateObject
from commands.rules import canonical_rules, rules_digest
from schemas import codec

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
NOW = 1_800_000_000_000
TOPIC = "commands"
MAX_MESSAGE_BYTES = 65_536  # the smallest allowed, so documents at the size limit stay cheap
KINDS = (CreateObject, UpdateObject, DeleteObject, GrantEditor, RevokeEditor, GrantReader, RevokeReader)
OBJECTS = ("o1", "o2", "o3", "ø-é", "x" * 256, "x" * 257, "", "a\x00b", "arbiter:rules", "arbiter")  # reserved, and not
PRINCIPALS = ("alice", "bob", "carol", "dave", "", "p" * 256, "p" * 257, "n\x00")
GROUPS = ((), ("team",), ("team", "other"))
GRANTEES = ("bob", "carol", "group:team", "alice", "", "g" * 256, "g" * 257, "z\x00", *(f"e{i}" for i in range(66)))
SECONDS = (0, 0, 1, 1, 60, 1800, 3600, 3601, 8000)  # under and past a dedup TTL of 1 h
VERSIONS = (None, None, None, 0, 1, 2, 3, 40)


def documents(limit: int) -> tuple[str, ...]:
    """Return the documents and patches a stream picks from: valid, invalid, and at the size limit and one past it."""
    def sized(n: int) -> str:
        return '{"p": "' + "x" * (n - 9) + '"}'
    deep = '{"d":' * 32 + "1" + "}" * 32
    return ('{"title": "first"}', '{"a": [1, 2.5, -0, 1e5, {"b": null}], "ü": "ö€😀"}', "[]", "not json", '{"a": 1',
            '{"x": "\\ud800"}', '{"x": "\\u00e9\\ud83d\\ude00"}', '{"z": "\\u0000"}', "", " {}", "\t{}\n", "\xa0{}",
            '{"n": NaN}', '{"n": 1e400}', '{"n": -Infinity}', '{"n": 1' + "0" * 5000 + "}", '{"a": 1,}', '{"a": 01}',
            '{"s": "tab\there"}', '{"a": 1} x', deep, '{"d":' + deep + "}", '{"k": "\\q"}', "{}", sized(limit),
            sized(limit + 1), '{"é": "' + "é" * 100 + '"}')


MANGLES = ("signed",) * 12 + ("unsigned", "missigned", "junk", "no value", "other key", "traced", "unknown schema",
                              "rules deployed before it")
# A rules document with one type, deployed by a control record (app.rules.control) in front of a step's command; its
# guard in warn mode fails for every command on a note, whose event then carries a warning (the fold's, never the core's).
RULES_DOCUMENT = canonical_rules('{"rules": 1, "types": {"note": {"create_schema": {"type": "object"}, "guards": [{'
                                 '"name": "watched", "expr": "caller.principal == \'nobody\'", "mode": "warn", '
                                 '"kinds": ["create", "update", "delete"], "message": "a note is watched"}]}}}')


TYPES = ("order", "ticket", "gone", "bad type!")
# Tracked text at the bound of 64 bytes (v1's order): {"/status":"draft","/tags":["x…x"]} is 32 bytes and the tag's.
_AT = 64 - len('{"/status":"draft","/tags":[""]}')
_ORDER_V1: dict[str, Any] = {
    "create_schema": {"type": "object", "required": ["status"], "properties": {
        "status": {"type": "string"}, "amount": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}},
        "level": {"enum": ["low", "high", "mid"]}}},
    "patch_schema": {"type": "object", "properties": {"status": {"type": ["string", "null"]},
                                                      "amount": {"type": ["number", "null"]}}},
    "tracked": {"status": "/status", "amount": "/amount", "who": "/meta/owner/name", "tags": "/tags", "level": "/level"},
    "max_tracked_bytes": 64,
    "transitions": [
        {"name": "status-flow", "field": "status", "initial": ["draft"], "message": "draft, submitted, then approved or rejected",
         "allowed": {"draft": ["submitted"], "submitted": ["approved", "rejected"], "approved": [], "rejected": []}},
        {"name": "level-flow", "field": "level", "mode": "warn", "allowed": {"low": ["high"], "high": ["low"]}}],
    "guards": [{"name": "approved-stays", "kinds": ["delete"], "expr": "state.status != 'approved'",
                "message": "approved orders stay"}]}
# Two documents a typed stream deploys in turn (versions 1, 2, ...): the second drops a type, tracks fewer fields under
# a lower bound, warns by default and lets an approved order be archived.
TYPED_RULES = (
    canonical_rules(json.dumps({"rules": 1, "types": {"order": _ORDER_V1, "ticket": {
        "tracked": {"phase": "/phase"},
        "transitions": [{"name": "phase", "field": "phase", "mode": "audit", "allowed": {"open": ["closed"], "closed": []}}]}}})),
    canonical_rules(json.dumps({"rules": 1, "mode": "warn", "types": {"order": {
        "create_schema": _ORDER_V1["create_schema"], "patch_schema": _ORDER_V1["patch_schema"],
        "tracked": {"status": "/status", "amount": "/amount"}, "max_tracked_bytes": 40,
        "transitions": [{"name": "status-flow", "field": "status", "mode": "enforce", "allowed": {
            "draft": ["submitted"], "submitted": ["approved", "rejected", "draft"], "approved": ["archived"],
            "rejected": [], "archived": []}}]}}})))
TYPED_DOCS = (
    '{"status": "draft", "amount": 5}', '{"status": "submitted", "amount": 1}', '{"amount": 2}',
    '{"status": "draft", "meta": {"owner": {"name": "ann"}}, "tags": ["a"]}',
    '{"status": "draft", "amount": 1.5e-7, "level": "mid"}',
    '{"status": "draft", "tags": ["' + "x" * _AT + '"]}', '{"status": "draft", "tags": ["' + "x" * (_AT + 1) + '"]}',
    '{"status": "draft", "tags": ["' + "é" + "x" * (_AT - 1) + '"]}',
    '{"status": "draft", "amount": -0, "x": 1e16, "level": "low", "y": [1.0, 0.1, 1e-5, 123456789012345678]}',
    '{"status": "draft", "amount": 123456789012345678901}', '{"phase": "open"}', '{"phase": "closed", "status": "draft"}',
    "not json", '{"status": "draft", "status": "submitted", "amount": 18446744073709551615}', "{}",
    '{"status": "draft", "level": "top"}', '{"status": ["draft", {"a": 1}]}', '{"status": "draft", "tags": [1, "x"]}',
    '{"status": "draft", "tags": "a~b/c"}')
TYPED_PATCHES = (
    '{"status": "submitted"}', '{"status": "approved"}', '{"status": "draft"}', '{"status": null}', '{"amount": 7}',
    '{"amount": 7.0}', '{"meta": {"owner": {"name": "bob"}}}', '{"meta": null}', '{"meta": {"owner": "x"}}',
    '{"title": "t"}', '{"level": "high"}', '{"level": "mid"}', '{"tags": ["' + "x" * (_AT - 4) + '"]}',
    '{"status": 5}', '{"phase": "closed"}', '{"phase": "open", "level": "low"}', '{"status": "rejected", "amount": -0.0}',
    '{"status": "archived"}', '{"tags": null, "meta": {"owner": {"name": "\\u00e9\\n\\"q\\u0001"}}}',
    '{"status": {"a": [1, "b"]}}', '{"amount": "x", "status": 1}', '{"amount": 1.5, "status": 2}', '{"status": "é"}',
    '{"meta": {"owner": {"name": "\u00e9\n"}}}')


@dataclass(frozen=True)
class Step:
    """One command record of a stream, as indices into the pools above (Hypothesis draws them)."""

    kind: int
    obj: int
    principal: int
    cid: int  # < 6: one of a few ids shared by all requests; else the request's own
    seconds: int
    version: int
    payload: int
    groups: int
    mangle: int
    cut: bool  # end the batch after this record
    typed: int = -1  # >= 0: a typed step, TYPES[typed] on create, TYPED_DOCS / TYPED_PATCHES[payload]
    deploy: bool = False  # deploy the next of TYPED_RULES (as the next version) before this record


def settings_for(var_dir: Path, core: str, **extra: Any) -> Settings:  # noqa: ANN401
    fields: dict[str, Any] = {"partitions": 1, "snapshot_every": 1000, "rocks_memory_mb": 16, "rocks_write_buffer_mb": 4,
                              "dedup_ttl_ms": 3_600_000, "tombstone_ttl_ms": 7_200_000,
                              "max_message_bytes": MAX_MESSAGE_BYTES}
    return Settings(var_dir=var_dir, core=core, **{**fields, **extra})


def batches_of(steps: list[Step], settings: Settings) -> list[list[InputRecord]]:
    """Return the records of ``steps`` cut into batches, offsets rising from 0 (a step may add a control record)."""
    signer = signer_for(settings)
    controls = signer_for(settings, CONTROL_DOMAIN)  # control records are signed in their own domain (app.signing)
    docs = documents(size_limits(settings.max_message_bytes).max_document_bytes)
    at, out, batch = T0, [], []
    deployed = 0
    offset = 0
    for s in steps:
        at += timedelta(seconds=SECONDS[s.seconds % len(SECONDS)])
        kind = KINDS[s.kind % len(KINDS)]
        oid, who = OBJECTS[s.obj % len(OBJECTS)], PRINCIPALS[s.principal % len(PRINCIPALS)]
        # < 6: a few ids every request shares; else one per request but its payload, so a resend is a retry (or, with
        # another payload, a reused key)
        cid = f"c{s.cid}" if s.cid < 6 else f"u{s.cid}-{s.kind}-{s.obj}-{s.principal}-{s.version}"
        common: dict[str, Any] = {"groups": GROUPS[s.groups % len(GROUPS)], "jti": "j" if s.groups == 2 else None}
        version = VERSIONS[s.version % len(VERSIONS)]
        if kind is CreateObject and s.typed >= 0:
            cmd: Any = kind(cid, oid, who, at, version, document=TYPED_DOCS[s.payload % len(TYPED_DOCS)],
                            object_type=TYPES[s.typed % len(TYPES)], **common)
        elif kind is UpdateObject and s.typed >= 0:
            cmd = kind(cid, oid, who, at, version, patch=TYPED_PATCHES[s.payload % len(TYPED_PATCHES)], **common)
        elif kind is CreateObject:
            typed = "note" if s.payload % 7 == 3 else None  # the rules' type (RULES_DOCUMENT): the fold decides it
            cmd = kind(cid, oid, who, at, version, document=docs[s.payload % len(docs)], object_type=typed, **common)
        elif kind is UpdateObject:
            cmd = kind(cid, oid, who, at, version, patch=docs[s.payload % len(docs)], **common)
        elif kind is DeleteObject:
            cmd = kind(cid, oid, who, at, version, **common)
        elif kind in (GrantEditor, RevokeEditor):
            cmd = kind(cid, oid, who, at, version, editor=GRANTEES[s.payload % len(GRANTEES)], **common)
        else:
            cmd = kind(cid, oid, who, at, version, reader=GRANTEES[s.payload % len(GRANTEES)], **common)
        key, value = oid.encode(), codec.encode_command(cmd)
        mangle = MANGLES[s.mangle % len(MANGLES)]
        if s.deploy:
            document = TYPED_RULES[deployed % len(TYPED_RULES)]
            deployed += 1
            control = encode_control(Deploy(deployed, rules_digest(document), document, "ops", T0))
            batch.append(InputRecord(CONTROL_KEY, control, TOPIC, 0, offset, controls.sign(CONTROL_KEY, control), None,
                                     None, RULES_CONTROL))
            offset += 1
        sig: bytes | None = signer.sign(key, value)
        trace = None
        if mangle == "unsigned":
            sig = None
        elif mangle == "missigned":
            sig = signer.sign(key, value + b"!")
        elif mangle == "junk":
            value = b"\x00\x00\x00\x00\x01junk"
        elif mangle == "no value":
            value = None  # type: ignore[assignment]
        elif mangle == "other key":
            key = b"o1" if oid != "o1" else b"o2"
        elif mangle == "traced":
            trace = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        elif mangle == "unknown schema":
            value = b"\x00\x00\x00\x99\x99" + value[5:]
        elif mangle == "rules deployed before it":
            deployed += 1
            control = encode_control(Deploy(deployed, rules_digest(RULES_DOCUMENT), RULES_DOCUMENT, "ops", T0))
            batch.append(InputRecord(CONTROL_KEY, control, TOPIC, 0, offset, controls.sign(CONTROL_KEY, control), None,
                                     None, RULES_CONTROL))
            offset += 1
        batch.append(InputRecord(key, value, TOPIC, 0, offset, sig, trace))
        offset += 1
        if s.cut:
            out.append(batch)
            batch = []
    if batch:
        out.append(batch)
    return out


def random_steps(rng: random.Random, n: int) -> list[Step]:
    """Return ``n`` steps drawn with ``rng``: mostly few objects and principals, so states build up; one in ten
    resends an earlier step (a retry: DUPLICATE while remembered), some with another payload (a reused key)."""
    steps = [Step(rng.choice((0, 0, 0, 1, 1, 1, 1, 2, 3, 4, 5, 6)), rng.choice((0, 0, 0, 1, 1, 2, 3, rng.randrange(8))),
                 rng.choice((0, 0, 0, 1, 2, rng.randrange(8))), rng.randrange(12), rng.randrange(len(SECONDS)),
                 rng.randrange(len(VERSIONS)), rng.randrange(120), rng.randrange(3),
                 0 if rng.random() < 0.95 else rng.randrange(len(MANGLES)), rng.random() < 0.15) for _ in range(n)]
    for i in range(1, n):
        if rng.random() < 0.1:
            steps[i] = replace(steps[rng.randrange(max(0, i - 3), i)], seconds=rng.randrange(4), cut=steps[i].cut)
            if rng.random() < 0.3:  # the same id for another request: IDEMPOTENCY_KEY_REUSED
                steps[i] = replace(steps[i], payload=rng.randrange(120))
    return steps


def typed_steps(rng: random.Random, n: int) -> list[Step]:
    """Return ``n`` typed steps drawn with ``rng`` over three objects: the first deploys TYPED_RULES' first document,
    one in forty the next; creates, updates, deletes and grants by the owner mostly, some retried."""
    steps = [Step(rng.choice((0, 0, 1, 1, 1, 1, 2, 3)), rng.choice((0, 0, 1, 2)), rng.choice((0, 0, 0, 1)),
                  rng.randrange(6, 12), rng.randrange(4), 0, rng.randrange(60), rng.randrange(3), 0,
                  rng.random() < 0.2, rng.choice((0, 0, 0, 1, 2, 3)), i == 0 or rng.random() < 0.025)
             for i in range(n)]
    for i in range(1, n):
        if rng.random() < 0.05:
            steps[i] = replace(steps[rng.randrange(max(0, i - 3), i)], deploy=False, cut=steps[i].cut)
    return steps


Run = tuple[list[list[Any]], list[bytes], dict[bytes, bytes], dict[str, int]]


def run(settings: Settings, checkpoint: str, batches: list[list[InputRecord]], core: ModuleType | None,
        gap_ms: int = 1_000_000) -> Run:
    """Run ``batches`` on one held shard (a shard server's way), deciding through ``core`` or the Python fold only.

    Returns the outputs, each batch's changelog bytes, the database's contents and the shard's counters.
    Batch ``b`` is decided at ``NOW + b * gap_ms``: with the default, states age past the TTLs now and then.
    """
    shard = open_shard(shard_dir(settings, checkpoint, 0), ShardStore(checkpoint, 0), 0, settings)
    shard._core_module = core  # noqa: SLF001  (the build check runs a build not yet installed)
    outputs, logs = [], []
    try:
        for b, batch in enumerate(batches):
            outputs.append(shard.run(b, batch, settings, NOW + b * gap_ms).outputs)
            logs.append(bytes(shard.db[b"m:log"]))
        contents = {bytes(k): bytes(v) for k, v in shard.db.items()
                    if not bytes(k).startswith((b"m:lineage", b"m:seed"))}
        counters = dict(shard.counters)
    finally:
        shard.close()
    return outputs, logs, contents, counters


def both(core: ModuleType, steps: list[Step], base: Path, **extra: Any) -> tuple[Run, Run]:  # noqa: ANN401
    """Return what the Python fold alone and the core (with its fallback) wrote for ``steps``, in fresh shards
    (``extra``: other settings for both)."""
    pure_settings, core_settings = settings_for(base / "pure", "off", **extra), settings_for(base / "core", "auto", **extra)
    batches = batches_of(steps, pure_settings)
    return (run(pure_settings, str(base / "pure-ckpt"), batches, None),
            run(core_settings, str(base / "core-ckpt"), batches, core))


def compare(core: ModuleType, steps: list[Step], base: Path) -> tuple[bool, dict[str, int]]:
    """Return (whether both paths wrote the same bytes for ``steps``, the compiled path's counters)."""
    pure, compiled = both(core, steps, base)
    return pure[:3] == compiled[:3], compiled[3]


def report(core: ModuleType, streams: int = 12, length: int = 400) -> dict[str, int]:
    """Run ``streams`` seeded streams through both paths; return how many differ and what the core decided."""
    tmp = Path(tempfile.mkdtemp(prefix="arbiter-core-check-"))
    totals: dict[str, int] = {"streams": streams, "differences": 0, "core_records": 0, "core_fallback_records": 0}
    try:
        for seed in range(streams):
            rng = random.Random(seed)  # noqa: S311
            steps = random_steps(rng, length) if seed % 2 == 0 else typed_steps(rng, length)
            same, counters = compare(core, steps, tmp / str(seed))
            totals["differences"] += not same
            totals["core_records"] += counters.get("core_records", 0)
            totals["core_fallback_records"] += counters.get("core_fallback_records", 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return totals
