"""What the validator must write, computed by folding ``commands.decide`` directly; shared by the validator tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from app.limits import size_limits
from app.rules.control import CONTROL_HEADER, is_control
from app.settings import Settings
from app.signing import SIGNATURE_HEADER, checker_for
from app.validator.decode import decode_record
from app.validator.fold import limits_for
from app.validator.headers import ce_headers
from app.validator.multi import is_multi
from app.validator.murmur2 import partition_for
from app.validator.outputs import outcome_record, record_size, too_large
from app.validator.parking import park
from app.validator.rules import NO_RULES, ShardRules, control_step, rules_checker
from app.validator.topic_io import Record, produce, read_all
from commands import Command, Event, ObjectState, Rejection, decide
from commands.unique import Answer, Hold, answer_step, home_step, index_step, uniques_of
from schemas import codec

Out = tuple[str, bytes | None, bytes | None, int, tuple[tuple[str, bytes], ...]]
ROOT = Path(__file__).resolve().parents[2]


def expected_outputs(commands: list[Command], settings: Settings,
                     states: dict[str, ObjectState | None] | None = None) -> list[Out]:
    """Fold ``commands`` through ``decide`` per object (``states`` carries on across calls) and encode the outputs."""
    states = {} if states is None else states
    limits = limits_for(settings)
    out: list[Out] = []
    for cmd in commands:
        d = decide(states.get(cmd.object_id), cmd, limits)
        states[cmd.object_id] = d.state
        key = cmd.object_id.encode()
        part = partition_for(key, settings.partitions)
        headers = ce_headers(d.outcome, settings.topic_commands)
        if isinstance(d.outcome, Event):
            out.append((settings.topic_events, key, codec.encode_event(d.outcome), part, headers))
        else:
            out.append((settings.topic_rejections, key, codec.encode_rejection(d.outcome), part, headers))
    return out


def topic_outputs(settings: Settings) -> list[Out]:
    """Everything on the events and rejections topics, as (topic, key, value, partition, headers)."""
    return [(r.topic, r.key, r.value, r.partition, r.headers) for t in (settings.topic_events, settings.topic_rejections)
            for r in read_all(settings, t)]


#: Two rules documents for the deploys in the middle of the kill tests (``send_with_deploys``): valid under the
#: domain's published schema, and different, so the version switch shows in the outputs.
RULES_V1 = '{"rules": 1, "types": {}}'
RULES_V2 = '{"rules": 1, "types": {}, "description": "v2"}'


def send_with_deploys(settings: Settings, commands: list[Command]) -> None:
    """Send ``commands`` in three parts with a rules deploy between each (``arbiter rules deploy``'s code: signed
    control records to every partition), and an unsigned control record after the first deploy, which the
    validator must refuse ``UNAUTHENTICATED`` without switching anything."""
    from app.rules.control import CONTROL_HEADER, CONTROL_KEY, RULES_CONTROL, Deploy, encode_control
    from app.rules.deploy import deploy
    from app.validator.topic_io import produce_with_headers
    from commands.rules import canonical_rules, rules_digest

    third = len(commands) // 3
    send_commands(settings, commands[:third])
    first = deploy(settings, RULES_V1, principal="ops:test").deploy
    forged_doc = canonical_rules(RULES_V2)
    forged = encode_control(Deploy(first.version + 1, rules_digest(forged_doc), forged_doc, "mallory",
                                   first.deployed_at))
    produce_with_headers(settings, [(CONTROL_KEY, forged, [(CONTROL_HEADER, RULES_CONTROL)], 0)],
                         settings.topic_commands)
    send_commands(settings, commands[third:2 * third])
    deploy(settings, RULES_V2, principal="ops:test")
    send_commands(settings, commands[2 * third:])


def assert_rules_version_headers(outputs: list[Out]) -> None:
    """Every output names its value's rules version in a ``ce_rulesversion`` header (decimal, just before
    ``content-type``) and an output decided under no rules has none: checked apart from ``ce_headers``, which the
    oracle's prediction shares with the validator."""
    for _, _, value, _, headers in outputs:
        version = codec.decode_outcome(value).rules_version
        names = [name for name, _ in headers]
        if version is None:
            assert "ce_rulesversion" not in names, headers
        else:
            at = names.index("ce_rulesversion")
            assert headers[at][1] == str(version).encode() and names[at + 1] == "content-type", headers


def rules_versions_seen(settings: Settings) -> Counter[int | None]:
    """Count the outputs on the events and rejections topics by the rules version they name."""
    return Counter(codec.decode_outcome(r[2]).rules_version for r in topic_outputs(settings))


def send_commands(settings: Settings, commands: list[Command]) -> None:
    """Put ``commands`` on the commands topic, keyed by object id."""
    produce(settings, [(c.object_id.encode(), codec.encode_command(c)) for c in commands])


def decided(settings: Settings) -> tuple[int, set[tuple[str | None, str | None]]]:
    """Return (output records on events + rejections, distinct (object_id, command_id) they decide)."""
    out = topic_outputs(settings)
    ids: set[tuple[str | None, str | None]] = set()
    for _, _, value, _, _ in out:
        o = codec.decode_outcome(value)
        ids.add((o.object_id, o.command_id))
    return len(out), ids


def probe(settings: Settings) -> Consumer:
    """A consumer for ``output_count`` to ask again and again (a new one per call costs a connection and threads)."""
    return Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "arbiter-probe", "log_level": 0})


def output_count(settings: Settings, consumer: Consumer | None = None) -> int:
    """Return the records on the events and rejections topics (sum of their high watermarks), cheaply."""
    c = consumer or probe(settings)
    try:
        return sum(c.get_watermark_offsets(TopicPartition(t, p), timeout=5)[1]
                   for t in (settings.topic_events, settings.topic_rejections) for p in range(settings.partitions))
    finally:
        if consumer is None:
            c.close()


def validator_env(settings: Settings) -> dict[str, str]:
    """The environment of a ``python -m app.validator`` child running ``settings`` (none of the caller's ARBITER_*)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env.update({
        "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "ARBITER_PARTITIONS": str(settings.partitions),
        "ARBITER_TOPIC_COMMANDS": settings.topic_commands, "ARBITER_TOPIC_EVENTS": settings.topic_events,
        "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections, "ARBITER_VAR_DIR": str(settings.var_dir),
        "ARBITER_STATE_BACKEND": settings.state_backend, "ARBITER_SPARK_MASTER": "local[2]",
        "ARBITER_TRIGGER_INTERVAL": "0 seconds", "ARBITER_SNAPSHOT_EVERY": str(settings.snapshot_every),
        "ARBITER_VALIDATOR_METRICS_PORT": "0",  # a test binds no fixed port
        "PYSPARK_PYTHON": sys.executable,
    })
    if settings.max_offsets_per_trigger is not None:
        env["ARBITER_MAX_OFFSETS_PER_TRIGGER"] = str(settings.max_offsets_per_trigger)
    return env


def start_validator(settings: Settings, log: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``python -m app.validator`` for ``settings`` in its own process group, output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "app.validator"],
                                env={**validator_env(settings), **(extra_env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)


def kill_mid_stream(job: subprocess.Popen[bytes], settings: Settings, commands: list[Command], log: Path,
                    timeout: float = 300) -> set[tuple[str | None, str | None]]:
    """SIGKILL ``job``'s process group once a third of ``commands`` have outputs and some have none yet.

    Returns what the topics decided at the kill, after asserting from them that at least one batch reached
    the topics and that commands are left undecided: otherwise the kill landed outside the stream.
    ``timeout`` covers the job's start too: its Spark JVM alone took 72 s on a machine at load 60 (a 120 s wait
    failed there with the job deciding), so it guards against a hang, not a slow start.
    """
    n = len(commands)
    assert len({(c.object_id, c.command_id) for c in commands}) == n, "command ids must tell the commands apart"
    deadline = time.monotonic() + timeout
    counter = probe(settings)
    try:
        while output_count(settings, counter) < n // 3:
            assert job.poll() is None, f"the validator exited with {job.returncode}: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no third of the outputs in {timeout:.0f} s: {log.read_text()[-3000:]}"
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the job's own process group: its driver, JVM and Python workers
        job.wait(30)
        counter.close()
    records, ids = decided(settings)
    assert records > 0, "no batch reached the topics before the kill"
    assert len(ids) < n, f"all {n} commands were decided before the kill landed: the kill proved nothing"
    return ids


def assert_restart_decided_the_rest(settings: Settings, commands: list[Command]) -> None:
    """Every command is decided and the topics hold exactly the oracle's records, identical duplicates allowed."""
    got = topic_outputs(settings)
    expected = expected_outputs(commands, settings)
    assert len(set(expected)) == len(expected)
    divergent, missing = set(got) - set(expected), set(expected) - set(got)
    assert not divergent and not missing, (f"{len(divergent)} divergent, {len(missing)} missing; e.g. "
                                           f"{[codec.decode_outcome(r[2]) for r in list(divergent | missing)[:2]]}")
    assert {(c.object_id, c.command_id) for c in commands} == decided(settings)[1]
    # Per topic and object, the first copies come out in the oracle's order (a replay repeats what it had written).
    first: dict[tuple[str, bytes | None], list[Out]] = {}
    for r in got:
        seen = first.setdefault((r[0], r[1]), [])
        if r not in seen:
            seen.append(r)
    want: dict[tuple[str, bytes | None], list[Out]] = {}
    for r in expected:
        want.setdefault((r[0], r[1]), []).append(r)
    assert first == want


def expected_from_records(records: list[Record], settings: Settings, parked: list[Out] | None = None, *,
                          states: dict[str, ObjectState | None] | None = None,
                          rules: dict[int, ShardRules] | None = None, start: ShardRules = NO_RULES,
                          holds: dict[str, Hold] | None = None) -> list[Out]:
    """What the validator must write for the raw ``records`` of the commands topic, garbage and misrouted included.

    Its own loop, not ``app.validator.fold``: every record in (partition, offset) order is decoded
    (``decode_record``, with the validator's own signature check), decided against its
    object's state by ``commands.decide`` under the rules in force at its offset in its partition (a rules control
    record switches them there, ``app.validator.rules.control_step``; no rules before the first), encoded, and
    replaced by a ``TOO_LARGE`` rejection when it does not fit a record; only accepted commands advance the state.
    A record that does not decode is parked (``app.validator.parking``: its rejection points to the parked copy,
    appended to ``parked`` if given).

    ``states`` and ``rules`` (per partition: the versions seen, the one in force), when given, carry on across
    calls, and a partition not in ``rules`` starts from ``start``: a rescaled generation (``app.rescale``) goes
    on from the objects' states of the one before, each new partition with the rules all old ones were on.

    Commands go through ``commands.unique.home_step`` (``decide``, holding an object that claims a unique value) and
    protocol records (``arbiter-control: multi``) through its index and answer steps; ``holds`` carries on too. Each
    key's records decide its state alone, so (partition, offset) order is the validator's for every key.
    """
    sizes, limits = size_limits(settings.max_message_bytes), limits_for(settings)
    states = {} if states is None else states
    rules = {} if rules is None else rules
    holds = {} if holds is None else holds
    checker = rules_checker(settings)
    command_checker = checker_for(settings)
    out: list[Out] = []
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        headers = dict(r.headers)
        shard = rules.get(r.partition, start)
        if is_control(headers.get(CONTROL_HEADER)):  # switches this partition's rules at this offset, or is refused
            step = control_step(shard, r.key, r.value, headers.get(SIGNATURE_HEADER), r.topic, r.partition,
                                r.offset, checker, sizes.keep_bytes)
            rules[r.partition] = step.rules
            if step.outcome is not None:
                out.append(outcome_record(step.outcome, settings, r.partition))
            continue
        signature = next((v for k, v in r.headers if k == SIGNATURE_HEADER), None)
        if is_multi(headers.get(CONTROL_HEADER)):  # a protocol record between keys (app.validator.multi)
            out += _protocol_step(r, signature, shard, states, holds, settings)
            continue
        item, signed = decode_record(r.key, r.value, r.topic, r.partition, r.offset, partitions=settings.partitions,
                                     keep=sizes.keep_bytes, id_bytes=sizes.max_id_bytes, signature=signature,
                                     checker=command_checker)
        if isinstance(item, Rejection):
            item, copy = park(item, r.key, r.value, r.topic, r.partition, r.offset, signature, settings, signed)
            if copy is not None and parked is not None:
                parked.append(copy)
            out.append(outcome_record(item, settings, r.partition))
            continue
        ruleset = shard.ruleset(shard.active)
        state, hold = states.get(item.object_id), holds.get(item.object_id)
        home = home_step(state, hold, item, uniques_of(ruleset), limits, ruleset)
        if home.hold is not None and hold is None:  # held: its event must fit a record, checked before any claim
            would = decide(state, item, limits, ruleset).outcome
            if record_size(outcome_record(would, settings, r.partition)) > sizes.max_record_bytes:
                out.append(too_large(would, record_size(outcome_record(would, settings, r.partition)), sizes,
                                     settings, r.key, r.value, r.topic, r.partition, r.offset))
                continue
        if home.outcome is not None:
            rec = outcome_record(home.outcome, settings, r.partition)
            if record_size(rec) > sizes.max_record_bytes:
                out.append(too_large(home.outcome, record_size(rec), sizes, settings, r.key, r.value, r.topic,
                                     r.partition, r.offset))
                continue
            out.append(rec)
            if isinstance(home.outcome, Event):
                states[item.object_id] = home.state
        _hold(holds, item.object_id, home.hold)
    return out


def _hold(holds: dict[str, Hold], key: str, hold: Hold | None) -> None:
    if hold is None:
        holds.pop(key, None)
    else:
        holds[key] = hold


def _protocol_step(r: Record, signature: bytes | None, shard: ShardRules, states: dict[str, ObjectState | None],
                   holds: dict[str, Hold], settings: Settings) -> list[Out]:
    """What one protocol record decides (``commands.unique``'s steps), with the validator's own signature check."""
    from app.validator.fold import InputRecord
    from app.validator.multi import read_message

    keep = size_limits(settings.max_message_bytes).keep_bytes
    message = read_message(InputRecord(r.key, r.value, r.topic, r.partition, r.offset, signature), settings, keep)
    if isinstance(message, Rejection):
        return [outcome_record(message, settings, r.partition)]
    if not isinstance(message, Answer):
        step = index_step(states.get(message.index), message)
        states[message.index] = step.entry
        return []
    hold = holds.get(message.home)
    ruleset = shard.ruleset(hold.rules_version if hold is not None else shard.active)
    result = answer_step(states.get(message.home), hold, message, uniques_of(ruleset), limits_for(settings), ruleset)
    _hold(holds, message.home, result.hold)
    if result.outcome is None:
        return []
    if isinstance(result.outcome, Event):
        states[message.home] = result.state
    return [outcome_record(result.outcome, settings, r.partition)]


def stop_validator(job: subprocess.Popen[bytes]) -> None:
    """Stop a ``start_validator`` child: SIGTERM, then SIGKILL of its process group after 60 s."""
    if job.poll() is None:
        os.kill(job.pid, signal.SIGTERM)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)


def assert_topics_equal_the_topic_oracle(settings: Settings, expected: list[Out] | None = None) -> None:
    """The events and rejections topics hold exactly what ``expected_from_records`` predicts from the commands topic
    read in offset order (rules switching at the control records), identical duplicates allowed, and per topic and
    key the first copies come out in the oracle's order. ``expected``: that prediction, made by the caller."""
    got = topic_outputs(settings)
    assert_rules_version_headers(got)
    if expected is None:
        expected = expected_from_records(read_all(settings, settings.topic_commands), settings)
    expected = [(t, k, v, p, h) for t, k, v, p, h in expected]
    assert len(set(expected)) == len(expected)
    divergent, missing = set(got) - set(expected), set(expected) - set(got)
    assert not divergent and not missing, (f"{len(divergent)} divergent, {len(missing)} missing; e.g. "
                                           f"{[codec.decode_outcome(r[2]) for r in list(divergent | missing)[:2]]}")
    first: dict[tuple[str, bytes | None], list[Out]] = {}
    for r in got:
        seen = first.setdefault((r[0], r[1]), [])
        if r not in seen:
            seen.append(r)
    want: dict[tuple[str, bytes | None], list[Out]] = {}
    for r in expected:
        want.setdefault((r[0], r[1]), []).append(r)
    assert first == want
