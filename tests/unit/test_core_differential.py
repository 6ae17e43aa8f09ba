"""The compiled core (core/, app.native.core) writes the Python fold's bytes: outputs, changelogs and states.

Streams of command records run through two shards, one deciding by the Python fold alone (the specification), one
through the core with its fallback; everything a shard writes is compared. ``./dev test`` builds the core
(``arbiter native build``), so the skip below happens only where no Rust toolchain exists, and there it fails the
suite (tests/conftest.py).
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.limits import size_limits
from app.native import core as core_loader
from app.native.core_check import (
    GRANTEES,
    KINDS,
    MANGLES,
    OBJECTS,
    PRINCIPALS,
    SECONDS,
    T0,
    TYPED_DOCS,
    TYPED_PATCHES,
    TYPES,
    VERSIONS,
    Step,
    both,
    documents,
    random_steps,
    run,
    settings_for,
    typed_steps,
)
from app.native.core_check import MAX_MESSAGE_BYTES as MESSAGE_BYTES
from app.signing import signer_for
from app.validator.fold import InputRecord
from app.validator.rocks import core_step
from commands import CreateObject, Event, ReasonCode, Rejection, UpdateObject
from schemas import codec

pytestmark = pytest.mark.unit

CORE = core_loader.load("auto")
needs_core = pytest.mark.skipif(CORE is None, reason=f"the compiled core is not built: {core_loader.status()}")


def few(n: int) -> st.SearchStrategy[int]:
    """Mostly the first few of ``n`` (so states build up), sometimes any."""
    return st.one_of(st.integers(0, min(2, n - 1)), st.integers(0, n - 1))


steps = st.builds(
    Step, kind=st.integers(0, len(KINDS) - 1), obj=few(len(OBJECTS)), principal=few(len(PRINCIPALS)),
    cid=st.integers(0, 11), seconds=st.integers(0, len(SECONDS) - 1), version=st.integers(0, len(VERSIONS) - 1),
    payload=st.integers(0, len(GRANTEES) + 40), groups=st.integers(0, 2),
    mangle=st.one_of(st.just(0), st.integers(0, len(MANGLES) - 1)), cut=st.booleans())


def assert_same(stream: list[Step]) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as d:
        pure, compiled = both(CORE, stream, Path(d))
    assert compiled[0] == pure[0], "outputs differ"
    assert compiled[1] == pure[1], "changelogs differ"
    assert compiled[2] == pure[2], "stored states differ"
    return compiled[3]


@needs_core
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=1, max_size=80))
def test_core_writes_the_python_folds_bytes_for_generated_streams(stream: list[Step]) -> None:
    assert_same(stream)


GENERIC = {ReasonCode.ALREADY_EXISTS, ReasonCode.NOT_FOUND, ReasonCode.DELETED, ReasonCode.VERSION_CONFLICT,
           ReasonCode.FORBIDDEN, ReasonCode.DUPLICATE, ReasonCode.TOO_LARGE, ReasonCode.MALFORMED,
           ReasonCode.IDEMPOTENCY_KEY_REUSED}


def test_the_core_implements_the_codecs_newest_schemas() -> None:
    """A new schema version with the core's table not moved along turns the core off for every batch, silently
    (the shard servers fall back to the Python fold; only a benchmark or the backends' comparison would notice):
    event v5 did exactly that (issue 52) until test_backends_compared caught it."""
    assert core_step.unusable() is None


@needs_core
def test_the_core_itself_decides_every_generic_reason_and_limit_exactly() -> None:
    # Only signed records, untyped creates and payloads the core decides (valid, or refused for a reason it computes):
    # no fallback.
    docs = documents(size_limits(MESSAGE_BYTES).max_document_bytes)
    unsure = {i for i, d in enumerate(docs) if any(m in d for m in ("NaN", "1e400", "Infinity", "\\u0000", "\\ud8",
                                                                  "\xa0", "0" * 5000))}
    reasons: set[ReasonCode] = set()
    events = 0
    for seed in range(12):
        stream = [s for s in random_steps(random.Random(seed), 500)  # noqa: S311
                  if s.kind not in (0, 1) or (s.payload % len(docs) not in unsure and not (s.kind == 0 and s.payload % 7 == 3))]
        stream = [Step(s.kind, s.obj, s.principal, s.cid, s.seconds, s.version, s.payload, s.groups, 0, s.cut)
                  for s in stream]
        with tempfile.TemporaryDirectory() as d:
            pure, compiled = both(CORE, stream, Path(d))
        assert compiled[:3] == pure[:3]
        assert compiled[3].get("core_fallback_records", 0) == 0, compiled[3]
        for batch in compiled[0]:
            for _, _, value, _, _ in batch:
                outcome = codec.decode_outcome(value)
                if isinstance(outcome, Rejection):
                    reasons.add(outcome.reason)
                else:
                    events += 1
    assert reasons == GENERIC and events > 50


@needs_core
def test_keys_the_core_declines_go_to_the_python_fold_and_are_counted() -> None:
    # One object, every mangle once: each batch's key falls back for its record's reason; the bytes stay the fold's.
    stream = [Step(0, 0, 0, 6, 0, 0, 0, 0, 0, True)]
    stream += [Step(1, 0, 0, 6, 1, 0, 0, 0, m, True) for m in range(len(MANGLES))]
    counters = assert_same(stream)
    assert counters["core_fallback_record"] == 6  # unsigned, missigned, junk, no value, other key, unknown schema
    assert counters["core_fallback_traced"] == 1
    assert counters["core_records"] == 1 + 12  # the create, then the twelve signed updates


@needs_core
@pytest.mark.parametrize("extra", [{"output_partitions": 3, "topic_commands": "commands.g1", "topic_commands_source": "commands"},
                                   {"allow_unsigned_commands": True}, {"partitions": 4}],
                         ids=["rescaled generation", "unsigned allowed", "misrouted records"])
def test_the_core_follows_the_settings_the_fold_reads(extra: dict[str, object]) -> None:
    # partitions=4: records read from partition 0 whose key belongs elsewhere are MISROUTED (the fold's, by fallback).
    stream = random_steps(random.Random(99), 300)  # noqa: S311
    with tempfile.TemporaryDirectory() as d:
        pure, compiled = both(CORE, stream, Path(d), **extra)
    assert compiled[:3] == pure[:3]
    if "partitions" in extra:  # the frequent ids belong to other partitions: the fold decides them MISROUTED
        assert compiled[3]["core_fallback_record"] > 100
    else:
        assert compiled[3]["core_records"] > 100


@needs_core
def test_under_rules_in_force_the_core_decides_untyped_objects_and_names_the_version() -> None:
    deploy = MANGLES.index("rules deployed before it")
    stream = [Step(0, 0, 0, 6, 0, 0, 0, 0, deploy, True)]  # rules v1, then an untyped create: the batch switches
    stream += [Step(1, 0, 0, 7 + i % 4, 1, 0, 0, 0, 0, i % 3 == 0) for i in range(12)]  # updates under v1
    stream += [Step(0, 1, 0, 6, 0, 0, 10, 0, 0, True)]  # a typed create ("note", an object document): the fold's
    with tempfile.TemporaryDirectory() as d:
        pure, compiled = both(CORE, stream, Path(d))
    assert compiled[:3] == pure[:3]
    counters = compiled[3]
    # the typed create: "note" has a guard (in warn mode) on create, so cel-cpp decides it in the fold
    assert counters["core_records"] == 12 and counters["core_fallback_rules"] == 1 and counters["core_fallback_guards"] == 1
    decided = [o for batch in compiled[0][1:-1] for o in batch]
    assert all(("ce_rulesversion", b"1") in headers for _, _, _, _, headers in decided)
    assert all(codec.decode_outcome(value).rules_version == 1 for _, _, value, _, _ in decided)
    outcomes = [codec.decode_outcome(value) for batch in compiled[0] for _, _, value, _, _ in batch]
    typed = [o for o in outcomes if isinstance(o, Event) and o.object_type == "note"]  # the fold's, warned
    assert [[(w.rule, w.mode) for w in o.warnings] for o in typed] == [[("note:watched", "warn")]]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)
documents_texts = st.one_of(
    json_values.map(lambda v: json.dumps({"v": v})),  # NaN and Infinity as Python writes them
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False, indent=1)),
    st.text(alphabet=st.sampled_from('{}[]":,.-+eE0123456789 \t\n\\u0adfnrtlsNIy\x00\x1fé€😀'), max_size=40))


@needs_core
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(documents_texts, min_size=1, max_size=12))
def test_the_cores_json_check_answers_as_json_text_for_generated_documents(texts: list[str]) -> None:
    # Each document as a create and then a patch of its own object: MALFORMED's message, or accepted, as the fold.
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        pure_settings = settings_for(base / "pure", "off")
        signer = signer_for(pure_settings)
        records = []
        for i, text in enumerate(texts):
            for j, cmd in enumerate((CreateObject(f"c{i}", f"o{i}", "alice", T0, document=text),
                                     UpdateObject(f"u{i}", f"o{i}", "alice", T0, patch=text))):
                k, v = cmd.object_id.encode(), codec.encode_command(cmd)
                records.append(InputRecord(k, v, "commands", 0, 2 * i + j, signer.sign(k, v)))
        pure = run(pure_settings, str(base / "pc"), [records], None)
        compiled = run(settings_for(base / "core", "auto"), str(base / "cc"), [records], CORE)
    assert compiled[:3] == pure[:3]


typed = st.builds(
    Step, kind=st.sampled_from((0, 1, 1, 2, 3)), obj=st.integers(0, 2), principal=st.sampled_from((0, 0, 1)),
    cid=st.integers(6, 11), seconds=st.integers(0, 3), version=st.just(0), payload=st.integers(0, 60),
    groups=st.integers(0, 2), mangle=st.just(0), cut=st.booleans(), typed=st.integers(0, len(TYPES) - 1),
    deploy=st.integers(0, 14).map(lambda n: n == 0))  # one in fifteen deploys the next document


@needs_core
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(typed, min_size=1, max_size=60))
def test_core_writes_the_python_folds_bytes_under_rules_deployed_mid_stream(stream: list[Step]) -> None:
    assert_same([Step(0, 0, 0, 6, 0, 0, 0, 0, 0, True, 0, True), *stream])


@needs_core
@pytest.mark.parametrize("seed", range(4))
def test_seeded_typed_streams_write_the_same_bytes_and_use_the_core(seed: int) -> None:
    counters = assert_same(typed_steps(random.Random(seed), 300))  # noqa: S311
    assert counters["core_records"] > 100, counters


def _typed(i: int, kind: int, obj: int, object_type: int, payload: int, *, deploy: bool = False) -> Step:
    """Return step ``i`` by alice, alone in its batch, with its own command id (cid > 11 is nobody else's)."""
    return Step(kind, obj, 0, 100 + i, 2, 0, payload, 0, 0, True, object_type, deploy)


@needs_core
def test_the_core_itself_decides_every_rule_reason_warnings_and_the_tracked_bound() -> None:
    doc, patch = TYPED_DOCS.index, TYPED_PATCHES.index
    order, ticket = TYPES.index("order"), TYPES.index("ticket")
    at_bound = doc('{"status": "draft", "tags": ["' + "x" * 32 + '"]}')
    plan = [  # (kind, object, type, document or patch): under v1
        (0, 1, TYPES.index("gone"), 0), (0, 1, TYPES.index("bad type!"), 0), (0, 1, order, 1),
        (0, 1, order, doc('{"amount": 2}')), (0, 1, order, doc('{"status": "draft", "level": "top"}')),
        (0, 1, order, doc('{"status": ["draft", {"a": 1}]}')), (0, 1, order, doc('{"status": "draft", "tags": [1, "x"]}')),
        (0, 1, order, at_bound + 1), (0, 1, order, at_bound + 2), (0, 1, order, at_bound), (0, 2, order, 4),
        (1, 0, 0, patch('{"status": "submitted"}')), (1, 0, 0, patch('{"status": "draft"}')),
        (1, 0, 0, patch('{"status": {"a": [1, "b"]}}')), (1, 0, 0, patch('{"amount": "x", "status": 1}')),
        (1, 0, 0, patch('{"status": null}')), (1, 0, 0, patch('{"title": "t"}')),
        (1, 0, 0, patch('{"meta": {"owner": {"name": "bob"}}}')), (1, 0, 0, patch('{"meta": {"owner": "x"}}')),
        (1, 0, 0, patch('{"level": "mid"}')), (1, 0, 0, patch('{"amount": 7.0}')), (1, 0, 0, 12), (1, 0, 0, 18),
        (3, 0, 0, 0), (0, 3, ticket, 10), (1, 3, 0, patch('{"phase": "closed"}')),
        (1, 3, 0, patch('{"phase": "open", "level": "low"}')), (1, 0, 0, patch('{"status": "approved"}')),
        (1, 0, 0, patch('{"status": "archived"}'))]
    later = [  # under v2: the ticket's type is gone, an approved order may be archived
        (1, 3, 0, patch('{"phase": "closed"}')), (1, 0, 0, patch('{"status": "archived"}')),
        (0, 4, order, doc('{"amount": 2}')),
        (1, 4, 0, patch('{"status": "approved"}')), (2, 3, 0, 0), (2, 0, 0, 0)]
    stream = [_typed(0, 0, 0, order, 0, deploy=True)]  # rules v1 and an order: the batch switches (the fold's)
    stream += [_typed(i + 1, *p) for i, p in enumerate(plan)]
    stream += [_typed(50, 1, 0, 0, patch('{"title": "t"}'), deploy=True)]  # v2 (the fold's batch)
    stream += [_typed(51 + i, *p) for i, p in enumerate(later)]
    with tempfile.TemporaryDirectory() as d:
        pure, compiled = both(CORE, stream, Path(d))
    assert compiled[:3] == pure[:3]
    counters = compiled[3]
    # every command but the two in the deploys' batches is the core's
    assert counters["core_fallback_records"] == 2 and counters["core_records"] == len(stream) - 2, counters
    rules, warned = set(), set()
    for batch in compiled[0]:
        for _, _, value, _, _ in batch:
            outcome = codec.decode_outcome(value)
            if isinstance(outcome, Rejection) and outcome.rule is not None:
                rules.add((outcome.reason, outcome.rule))
            elif isinstance(outcome, Event):
                warned |= {(w.rule, w.mode, w.reason) for w in outcome.warnings}
    assert rules == {(ReasonCode.RULE_VIOLATED, "types"), (ReasonCode.RULE_VIOLATED, "order:status-flow"),
                     (ReasonCode.TOO_LARGE, "order:max_tracked_bytes"), (ReasonCode.RULE_VIOLATED, "order:create_schema"),
                     (ReasonCode.RULE_VIOLATED, "order:patch_schema")}, rules
    assert warned == {("order:level-flow", "warn", "RULE_VIOLATED"), ("ticket:phase", "audit", "RULE_VIOLATED"),
                      ("order:create_schema", "warn", "RULE_VIOLATED")}, warned
