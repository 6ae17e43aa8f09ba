"""Rules control records a shard must not take (issue 47, findings 5 and 6): a deploy race's losing claim, a version
that skips one, an unsigned record while unsigned commands are allowed.

The records are what ``app.rules.deploy`` writes (to a broker kept in memory here), decided by the rocks backend's
shard; ``tests/unit/test_validator_rules.py`` holds the rest of the control step.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import app.rescale.generation as gen
import app.rules.catalog as catalog
import app.rules.deploy as deploy_mod
from app.errors import BrokerUnavailable
from app.rules.control import CONTROL_HEADER, CONTROL_KEY, RULES_CONTROL, Deploy, decode_control, encode_control
from app.rules.deploy import RulesConflict, deploy
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.validator.fold import InputRecord
from app.validator.rocks.checkpoint import ShardStore
from app.validator.rocks.shard import open_shard, run_task, shard_dir
from app.validator.rules import ShardRules
from app.validator.topic_io import Record
from commands import CreateObject, ReasonCode
from commands.rules import canonical_rules, rules_digest
from schemas import codec
from tests.unit.record_strategies import signature

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
NOW = 1_800_000_000_000
DOCS = [canonical_rules(f'{{"rules": 1, "types": {{}}, "description": "{name}"}}') for name in "ABCD"]


class FakeBroker:
    """Topics in memory, as ``read_all`` and ``produce_with_headers`` see them; ``before_produce`` runs first."""

    def __init__(self) -> None:
        self.topics: dict[str, list[Record]] = {}
        self.before_produce: Callable[[str, list], None] | None = None

    def read_all(self, settings: Settings, topic: str, timeout: float = 30, since: int = 0) -> list[Record]:
        return list(self.topics.get(topic, []))

    def append(self, topic: str, key: bytes | None, value: bytes, headers, partition: int) -> int:  # noqa: ANN001
        records = self.topics.setdefault(topic, [])
        offset = sum(1 for r in records if r.partition == partition)
        records.append(Record(topic, partition, offset, key, value, tuple(headers)))
        return offset

    def produce(self, settings: Settings, records, topic: str) -> list[tuple[int, int]]:  # noqa: ANN001
        records = list(records)
        if self.before_produce is not None:
            self.before_produce(topic, records)
        return [(p or 0, self.append(topic, k, v, h, p or 0)) for k, v, h, p in records]


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBroker]:
    b = FakeBroker()
    monkeypatch.setattr(deploy_mod, "read_all", b.read_all)
    monkeypatch.setattr(deploy_mod, "produce_with_headers", b.produce)
    monkeypatch.setattr(deploy_mod, "ensure_rules_topic", lambda settings: None)
    monkeypatch.setattr(catalog, "read_all", b.read_all)
    monkeypatch.setattr(catalog, "deployed", lambda s: catalog.winners(b.read_all(s, s.rules_topic), s))
    monkeypatch.setattr(gen, "current_generation_settings", lambda s: s)
    yield b


def _settings(tmp_path: Path, **extra: object) -> Settings:
    return Settings(partitions=1, var_dir=tmp_path / "var", rocks_memory_mb=16, rocks_write_buffer_mb=4,
                    **extra)  # type: ignore[arg-type]


def _input(r: Record, offset: int) -> InputRecord:
    """``r`` as the validator reads it from partition 0 of the commands topic at ``offset``."""
    headers = dict(r.headers)
    return InputRecord(r.key, r.value, "commands", 0, offset, headers.get(SIGNATURE_HEADER), None, None,
                       headers.get(CONTROL_HEADER))


def _create(offset: int) -> InputRecord:
    cmd = CreateObject(f"c{offset}", f"o{offset}", "alice", T0, document="{}")
    k, v = cmd.object_id.encode(), codec.encode_command(cmd)
    return InputRecord(k, v, "commands", 0, offset, signature(k, v))


def _decide(s: Settings, ckpt: str, records: list[InputRecord], batch: int = 0) -> tuple[list, ShardRules]:
    """Run the records through partition 0's shard as batch ``batch``; return its outputs and rules after."""
    outputs = run_task(s, ckpt, batch, records, NOW).outputs
    shard = open_shard(shard_dir(s, ckpt, 0), ShardStore(ckpt, 0), 1, s)
    try:
        return outputs, shard.rules()
    finally:
        shard.close()


def _reasons(outputs: list) -> list[str]:  # noqa: ANN001
    return [codec.decode_rejection(o[2]).reason for o in outputs if o[0] == Settings().topic_rejections]


def _controls(b: FakeBroker, s: Settings) -> list[Record]:
    return [r for r in b.topics[s.topic_commands] if dict(r.headers).get(CONTROL_HEADER) == RULES_CONTROL]


def test_a_copy_of_a_deploy_races_losing_claim_switches_no_shard(broker: FakeBroker, tmp_path: Path) -> None:
    s = _settings(tmp_path)
    deploy(s, DOCS[0], principal="ops:alice", now=T0)  # version 1, everywhere
    rival_env = FakeBroker()
    rival_env.topics = copy.deepcopy(broker.topics)
    broker_state = broker.topics
    broker.topics = rival_env.topics
    deploy(s, DOCS[2], principal="ops:carol", now=T0)  # carol's version 2 (in a world of its own: only its claim)
    carol_claim = rival_env.topics[s.rules_topic][-2]
    broker.topics = broker_state

    def race(topic: str, records: list) -> None:  # carol's claim lands just before bob's
        if topic == s.rules_topic and broker.before_produce is not None:
            broker.before_produce = None
            broker.topics[topic].append(Record(topic, 0, len(broker.topics[topic]), carol_claim.key,
                                               carol_claim.value, carol_claim.headers))

    broker.before_produce = race
    with pytest.raises(RulesConflict):
        deploy(s, DOCS[1], principal="ops:bob", now=T0)
    bob_claim = broker.topics[s.rules_topic][-1]
    assert b"ops:bob" in (bob_claim.value or b"")
    [v1] = _controls(broker, s)
    outputs, rules = _decide(s, str(tmp_path / "ckpt"), [_input(v1, 0), _input(bob_claim, 1), _create(2)])
    assert rules.active == 1 and 2 not in rules.documents  # bob's document was never deployed
    assert _reasons(outputs) == [ReasonCode.UNAUTHENTICATED]


def test_a_shard_takes_only_the_version_after_its_own(broker: FakeBroker, tmp_path: Path) -> None:
    s = _settings(tmp_path)
    for n, doc in enumerate(DOCS[:3]):
        deploy(s, doc, principal="ops:alice", now=T0)
        assert len(_controls(broker, s)) == n + 1
    v1, v2, v3 = _controls(broker, s)
    ckpt = str(tmp_path / "ckpt")
    outputs, rules = _decide(s, ckpt, [_input(v1, 0), _input(v3, 1)])  # a copy of v3 before v2 reached it
    assert rules.active == 1 and _reasons(outputs) == [ReasonCode.VERSION_CONFLICT]
    outputs, rules = _decide(s, ckpt, [_input(v2, 2), _input(v3, 3)], batch=1)
    assert rules.active == 3 and _reasons(outputs) == []


def test_a_deploy_after_a_stopped_one_writes_the_stopped_version_first(broker: FakeBroker, tmp_path: Path) -> None:
    s = _settings(tmp_path)
    deploy(s, DOCS[0], principal="ops:alice", now=T0)

    def outage(topic: str, records: list) -> None:  # the claim is made, its control records are not written
        if topic == s.topic_commands:
            broker.before_produce = None
            raise BrokerUnavailable("the broker went away")

    broker.before_produce = outage
    with pytest.raises(BrokerUnavailable):
        deploy(s, DOCS[1], principal="ops:alice", now=T0)
    deploy(s, DOCS[2], principal="ops:alice", now=T0)  # another document: version 3, after finishing version 2
    controls = _controls(broker, s)
    assert [decode_control(r.value).version for r in controls] == [1, 2, 3]
    outputs, rules = _decide(s, str(tmp_path / "ckpt"), [_input(r, i) for i, r in enumerate(controls)])
    assert rules.active == 3 and _reasons(outputs) == []


@pytest.mark.parametrize("unsigned_commands", [False, True])
def test_an_unsigned_control_record_is_never_accepted(broker: FakeBroker, tmp_path: Path,
                                                      unsigned_commands: bool) -> None:
    s = _settings(tmp_path, allow_unsigned_commands=unsigned_commands)
    huge = encode_control(Deploy(10**15, rules_digest(DOCS[3]), DOCS[3], "mallory", T0))
    forged = Record("commands", 0, 0, CONTROL_KEY, huge, ((CONTROL_HEADER, RULES_CONTROL),))
    deploy(s, DOCS[0], principal="ops:alice", now=T0)
    [v1] = _controls(broker, s)
    outputs, rules = _decide(s, str(tmp_path / "ckpt"), [_input(forged, 0), _input(v1, 1)])
    assert rules.active == 1 and _reasons(outputs) == [ReasonCode.UNAUTHENTICATED]
