"""The shard's decision step through the compiled core (``core/``, ``app.native.core``): one call per batch.

The core decides the keys it can (records that decode into signed commands, under the rules in force, if any, for
the whole batch: typed objects too, short of guards and schema errors) and hands the others back by reason; the
shard folds those in Python, so every output is the pure domain's.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from app.limits import size_limits
from app.native.core_rules import core_rules
from app.settings import Settings
from app.signing import checker_for
from app.validator.fold import InputRecord, limits_for
from app.validator.headers import source
from commands.rules import RuleSet
from schemas.catalog import COMMAND, EVENT, REJECTION, STATE, SchemaCatalog, SchemaVersion
from schemas.codec import default_codec
from schemas.compiled import COMPILED, PREDECESSORS
from schemas.wire import header

# The schema versions the core reads and writes (core/src/model.rs); another newest version turns the core off.
CORE_SCHEMAS = {COMMAND: 4, EVENT: 5, REJECTION: 4, STATE: 3}
# batch::Fallback in core/src/batch.rs: why a key went back to the Python fold (the shard counts them, and
# ``rules`` for every record of a batch decided under rules, ``no_key`` for keyless records).
FALLBACKS = {1: "record", 2: "payload", 3: "state", 4: "too_large", 5: "traced", 6: "typed", 7: "guards", 8: "schema"}

KeyResult = int | tuple[list[Any], bytes | None, bool]


def written(catalog: SchemaCatalog, subject: str) -> SchemaVersion:
    """Return the version the codec writes the core's values of ``subject`` with: the newest, or its predecessor
    (``schemas.compiled.PREDECESSORS``: the core writes none of the reasons a newer rejection schema added)."""
    latest = catalog.latest(subject)
    pred = PREDECESSORS.get(subject)
    if pred is not None and COMPILED[subject].schema == latest.schema:
        older = [v for v in catalog.versions() if v.subject == subject and v.schema == pred.schema]
        if older:
            return older[0]
    return latest


def unusable(catalog: SchemaCatalog = default_codec.catalog) -> str | None:
    """Return why the core cannot decide with this codec's schemas (not the versions it implements), or None."""
    for subject, version in CORE_SCHEMAS.items():
        latest = catalog.latest(subject)
        wrote = written(catalog, subject)
        if wrote.version != version or COMPILED[subject].schema != latest.schema:
            return f"{subject}'s newest schema is v{latest.version}, the core implements v{version}"
    return None


def core_config(core: ModuleType, settings: Settings, partition: int, now_ms: int,
                ruleset: RuleSet | None) -> dict[str, Any]:
    """Return what ``core`` needs of ``settings`` for one partition's batch decided at ``now_ms`` under the team's
    rules ``ruleset`` (None: none in force)."""
    limits = limits_for(settings)
    sizes = size_limits(settings.max_message_bytes)
    catalog = default_codec.catalog
    checker = checker_for(settings)  # validates the key set as the Python path does
    keys = None if checker is None else [(kid.encode(), secret.encode("utf-8"))
                                         for kid, secret in settings.record_secrets().items()]
    assert limits.dedup_ttl is not None  # noqa: S101  (limits_for always sets it)
    return {
        "partition": partition, "partitions": settings.partitions, "output_partitions": settings.output_partitions,
        "now_ms": now_ms, "dedup_ttl_ms": settings.dedup_ttl_ms, "tombstone_ttl_ms": settings.tombstone_ttl_ms,
        "record_bound": sizes.max_record_bytes, "max_editors": limits.max_editors, "max_recent": limits.max_recent,
        "max_document_bytes": limits.max_document_bytes, "max_readers": limits.max_readers,
        "max_id_bytes": limits.max_id_bytes, "max_json_depth": limits.max_json_depth, "record_keys": keys,
        "command_header": header(catalog.latest(COMMAND).schema_id), "state_header": header(catalog.latest(STATE).schema_id),
        "event_header": header(catalog.latest(EVENT).schema_id),
        "rejection_header": header(written(catalog, REJECTION).schema_id),
        "rules_version": ruleset.version if ruleset is not None else None, "rules": core_rules(core, ruleset),
        "topic_events": settings.topic_events, "topic_rejections": settings.topic_rejections,
        "ce_source": source(settings.topic_commands_source or settings.topic_commands),
    }


def decide_keys(core: ModuleType, config: dict[str, Any], keys: Sequence[bytes], raw_states: Sequence[bytes | None],
                groups: Sequence[Sequence[InputRecord]]) -> list[KeyResult]:
    """Return, per key, the core's ``(outputs, stored value or None, deleted)`` or the int reason it declined."""
    starts = [0]
    values: list[bytes | None] = []
    signatures: list[bytes | None] = []
    traces: list[bytes | None] = []
    for recs in groups:
        for r in recs:
            v, s = r.value, r.signature
            values.append(v if v is None or type(v) is bytes else bytes(v))
            signatures.append(s if s is None or type(s) is bytes else bytes(s))
            traces.append(r.traceparent)
        starts.append(len(values))
    raws = [r if r is None or type(r) is bytes else bytes(r) for r in raw_states]
    result: list[KeyResult] = core.decide_batch(config, list(keys), raws, starts, values, signatures, traces)
    return result
