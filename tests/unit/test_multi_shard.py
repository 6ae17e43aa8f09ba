"""Unique values through the rocksdb shards (issue 53, app.validator.multi): four partitions' shards exchange signed
protocol records through an in-memory commands topic, batches of random sizes, some re-run (a kill -9's re-emit),
and every output equals the sequential reference (commands.unique_log) run over the topic in offset order."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.rules.control import CONTROL_HEADER, CONTROL_KEY, RULES_CONTROL, Deploy, encode_control
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.validator.fold import InputRecord
from app.validator.multi import MULTI_CONTROL, message_headers
from app.validator.murmur2 import partition_for
from app.validator.outputs import outcome_record
from app.validator.rocks.shard import run_task
from commands import CreateObject, Event, Rejection, UpdateObject
from commands.rules import canonical_rules, compile_rules, rules_digest
from commands.unique import INDEX_TYPE, decode_message, encode_message, uniques_of
from commands.unique_log import UniqueLog
from schemas import codec
from tests.unit.record_strategies import control_signature, signature

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 27, 23, 0, tzinfo=UTC)
NOW = 1_800_000_000_000
PARTITIONS = 4
DOC = canonical_rules(json.dumps({"rules": 1, "types": {"user": {"tracked": {"email": "/email"}, "unique": ["email"]}}}))
RULES = compile_rules(DOC, version=1)

Raw = tuple[bytes, bytes, tuple[tuple[str, bytes], ...]]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(partitions=PARTITIONS, var_dir=tmp_path / "var", snapshot_every=1000, rocks_memory_mb=16,
                    rocks_write_buffer_mb=4)


class Pipeline:
    """The commands topic in memory and one shard per partition, batch after batch."""

    def __init__(self, settings: Settings, ckpt: str) -> None:
        self.settings, self.ckpt = settings, ckpt
        self.parts: list[list[Raw]] = [[] for _ in range(PARTITIONS)]
        self.read = [0] * PARTITIONS
        self.outputs: list[tuple[str, bytes | None, bytes, int, tuple[tuple[str, bytes], ...]]] = []
        self.batch = 0

    def produce(self, key: bytes, value: bytes, headers: tuple[tuple[str, bytes], ...], partition: int) -> None:
        self.parts[partition].append((key, value, headers))

    def command(self, cmd: CreateObject | UpdateObject) -> None:
        k, v = cmd.object_id.encode(), codec.encode_command(cmd)
        self.produce(k, v, ((SIGNATURE_HEADER, signature(k, v)),), partition_for(k, PARTITIONS))

    def rounds(self, rnd: random.Random) -> None:
        while any(self.read[p] < len(self.parts[p]) for p in range(PARTITIONS)):
            for p in range(PARTITIONS):
                left = len(self.parts[p]) - self.read[p]
                if left == 0 or rnd.random() < 0.3:
                    continue
                take = rnd.randint(1, left)
                records = [self._input(p, o) for o in range(self.read[p], self.read[p] + take)]
                self.read[p] += take
                got = run_task(self.settings, self.ckpt, self.batch, records, NOW)
                copies = 2 if rnd.random() < 0.3 else 1
                if copies == 2:  # Spark runs the batch again (a crash after the shard's write): the same bytes
                    again = run_task(self.settings, self.ckpt, self.batch, records, NOW)
                    assert again.replayed and again.outputs == got.outputs
                for _ in range(copies):
                    for topic, key, value, partition, headers in got.outputs:
                        if topic == self.settings.topic_commands:
                            assert key is not None
                            self.produce(key, value, headers, partition)
                        else:
                            self.outputs.append((topic, key, value, partition, headers))
            self.batch += 1

    def _input(self, p: int, offset: int) -> InputRecord:
        key, value, headers = self.parts[p][offset]
        h = dict(headers)
        return InputRecord(key, value, self.settings.topic_commands, p, offset, h.get(SIGNATURE_HEADER), None, None,
                           h.get(CONTROL_HEADER))


def deploy_everywhere(pipe: Pipeline) -> None:
    value = encode_control(Deploy(1, rules_digest(DOC), DOC, "ops", T0))
    for p in range(PARTITIONS):
        pipe.produce(CONTROL_KEY, value, ((SIGNATURE_HEADER, control_signature(CONTROL_KEY, value)),
                                          (CONTROL_HEADER, RULES_CONTROL)), p)


def oracle(pipe: Pipeline, settings: Settings) -> tuple[set[tuple], Counter[bytes]]:
    """Decide the topic's records in (partition, offset) order with the sequential reference: the outputs it
    predicts, and the protocol records it sends (each key's records decide its state alone, so any order that keeps
    each partition's is the validator's)."""
    log = UniqueLog(uniques_of(RULES), rules=RULES)
    out: set[tuple] = set()
    sent: Counter[bytes] = Counter()
    for p in range(PARTITIONS):
        for _key, value, headers in pipe.parts[p]:
            h = dict(headers)
            if h.get(CONTROL_HEADER) == RULES_CONTROL:
                continue
            record = decode_message(value) if h.get(CONTROL_HEADER) == MULTI_CONTROL else codec.decode_command(value)
            outcome, messages = log.step(record)
            if outcome is not None:
                out.add(outcome_record(outcome, settings, p))
            for m in messages:
                sent[encode_message(m)] += 1
    return out, sent


@pytest.mark.parametrize("seed", range(6))
def test_fifty_clients_racing_through_the_shards_make_exactly_ten_winners(settings: Settings, tmp_path: Path,
                                                                         seed: int) -> None:
    rnd = random.Random(seed)
    pipe = Pipeline(settings, str(tmp_path / "ckpt"))
    deploy_everywhere(pipe)
    clients = list(range(50))
    rnd.shuffle(clients)
    for n in clients[:25]:
        pipe.command(CreateObject(f"c{n}", f"user-{n}", f"client-{n}", T0 + timedelta(seconds=n),
                                  document=json.dumps({"email": f"{n % 10}@example.com"}), object_type="user"))
    pipe.rounds(rnd)
    for n in clients[25:]:  # the second half arrives while the first half's claims are still going round
        pipe.command(CreateObject(f"c{n}", f"user-{n}", f"client-{n}", T0 + timedelta(seconds=n),
                                  document=json.dumps({"email": f"{n % 10}@example.com"}), object_type="user"))
    pipe.rounds(rnd)
    decided = [codec.decode_outcome(v) for _, _, v, _, _ in pipe.outputs]
    created = {o.object_id for o in decided if isinstance(o, Event)}
    refused = Counter(o.reason.value for o in decided if isinstance(o, Rejection))
    assert len(created) == 10 and set(refused) == {"UNIQUE_VIOLATION"}, (created, refused)
    assert {o.object_id for o in decided if isinstance(o, Rejection)} | created == {f"user-{n}" for n in range(50)}
    expected, sent = oracle(pipe, settings)
    assert set(pipe.outputs) == expected
    on_topic = Counter(v for p in pipe.parts for _, v, h in p if dict(h).get(CONTROL_HEADER) == MULTI_CONTROL)
    assert set(on_topic) == set(sent)  # every protocol record the reference sends, and no other
    for p in pipe.parts:  # each signed as the validator signs it
        for key, value, headers in p:
            if dict(headers).get(CONTROL_HEADER) == MULTI_CONTROL:
                assert headers == message_headers(settings, key, value)


def test_a_forged_protocol_record_is_unauthenticated_and_grants_nothing(settings: Settings, tmp_path: Path) -> None:
    pipe = Pipeline(settings, str(tmp_path / "ckpt"))
    deploy_everywhere(pipe)
    pipe.command(CreateObject("c1", "user-1", "alice", T0, document='{"email":"a@x"}', object_type="user"))
    pipe.rounds(random.Random(1))
    index = next(json.loads(v)["index"] for p in pipe.parts for _, v, h in p
                 if dict(h).get(CONTROL_HEADER) == MULTI_CONTROL)
    forged = json.dumps({"decision": "d", "holder": "user-1", "index": index, "kind": "release", "v": 1},
                        sort_keys=True, separators=(",", ":")).encode()
    key = index.encode()
    pipe.produce(key, forged, ((CONTROL_HEADER, MULTI_CONTROL), (SIGNATURE_HEADER, signature(key, forged))),
                 partition_for(key, PARTITIONS))  # signed as a command, not as a protocol record
    pipe.command(CreateObject("c2", "user-2", "bob", T0, document='{"email":"a@x"}', object_type="user"))
    pipe.rounds(random.Random(2))
    decided = [codec.decode_outcome(v) for _, _, v, _, _ in pipe.outputs]
    assert [o.reason.value for o in decided if isinstance(o, Rejection)] == ["UNAUTHENTICATED", "UNIQUE_VIOLATION"]
    assert [o.object_id for o in decided if isinstance(o, Event)] == ["user-1"]
    assert INDEX_TYPE.startswith("arbiter:")


def test_verify_replay_refolds_each_key_to_the_shards_outputs(settings: Settings, tmp_path: Path) -> None:
    """``arbiter verify replay``'s per-key refold (app.verify.refold) re-decides commands and protocol records alike:
    every key's refold together is exactly what the shards wrote, duplicates of re-run batches included."""
    from app.verify.refold import Row, refold
    from app.verify.timeline import build_timeline

    rnd = random.Random(11)
    pipe = Pipeline(settings, str(tmp_path / "ckpt"))
    deploy_everywhere(pipe)
    for n in range(20):
        pipe.command(CreateObject(f"c{n}", f"user-{n}", f"client-{n}", T0 + timedelta(seconds=n),
                                  document=json.dumps({"email": f"{n % 4}@example.com"}), object_type="user"))
    pipe.rounds(rnd)
    rows = [Row(settings.topic_commands, p, o, 1000 + o, k, v, h) for p, part in enumerate(pipe.parts)
            for o, (k, v, h) in enumerate(part)]
    controls = [(r.topic, r.partition, r.offset, r.key, r.value, dict(r.headers).get(SIGNATURE_HEADER))
                for r in rows if dict(r.headers).get(CONTROL_HEADER) == RULES_CONTROL]
    timeline = build_timeline(controls, settings)
    by_key: dict[bytes | None, list[Row]] = {}
    for r in rows:
        if dict(r.headers).get(CONTROL_HEADER) != RULES_CONTROL:
            by_key.setdefault(r.key, []).append(r)
    refolded = {o for key_rows in by_key.values() for o, _ in refold(key_rows, timeline, settings).outputs}
    assert refolded == set(pipe.outputs)
    assert sum(isinstance(codec.decode_outcome(o[2]), Event) for o in refolded) == 4
