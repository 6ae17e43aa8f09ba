"""``arbiter rules what-if``'s fold without Spark: a candidate that tightens the rules flips accepted -> rejected, and
one that loosens them flips rejected -> accepted; both directions are reported and counted."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from app.rules.control import CONTROL_KEY, Deploy, encode_control
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.validator.murmur2 import partition_for
from app.verify.refold import Row
from app.verify.timeline import build_timeline
from app.verify.whatif import WhatIfReport, flips
from commands import CreateObject, UpdateObject
from commands.rules import canonical_rules, rules_digest
from schemas import codec
from tests.unit.record_strategies import control_signature, signature

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = Settings()
PART = partition_for(b"o1", S.partitions)


def rules(limit: int) -> str:
    """A type ``t`` whose ``n`` must stay under ``limit``."""
    return canonical_rules(json.dumps({"rules": 1, "types": {"t": {"tracked": {"n": "/n"}, "guards": [
        {"name": "small", "expr": f"next.n < {limit}", "message": f"n stays under {limit}"}]}}}))


IN_FORCE = rules(10)
COMMANDS = [CreateObject("c1", "o1", "alice", T0, document='{"n": 0}', object_type="t"),  # accepted under all
            UpdateObject("u1", "o1", "alice", T0 + timedelta(seconds=1), patch='{"n": 5}'),  # accepted under 10
            UpdateObject("u2", "o1", "alice", T0 + timedelta(seconds=2), patch='{"n": 50}')]  # rejected under 10


def command_rows() -> list[Row]:
    """``COMMANDS`` on the commands topic, at offsets 10.. of their partition, signed as Arbiter signs them."""
    out = []
    for i, c in enumerate(COMMANDS):
        k, v = c.object_id.encode(), codec.encode_command(c)
        out.append(Row(S.topic_commands, PART, 10 + i, 1000 + i, k, v, ((SIGNATURE_HEADER, signature(k, v)),)))
    return out


def test_a_loosened_candidate_flips_rejected_to_accepted_and_a_tightened_one_the_other_way() -> None:
    commands, switch_ms = command_rows(), 1000  # the candidate is in force from the first command on
    # the rules in force: IN_FORCE deployed as v1 at offset 5, before the commands
    control = encode_control(Deploy(1, rules_digest(IN_FORCE), IN_FORCE, "ops", T0))
    now = build_timeline([(S.topic_commands, PART, 5, CONTROL_KEY, control, control_signature(CONTROL_KEY, control))], S)
    assert now.version_at(S.topic_commands, PART, 10) == 1

    loose = flips(commands, now, now.with_candidate(rules(100), switch_ms), S)
    assert [(f.command_id, f.direction, f.rule, f.reason, f.old, f.new) for f in loose] == [
        ("u2", "rejected->accepted", "t:small", "RULE_VIOLATED", "REJECTED RULE_VIOLATED [t:small]",
         "ACCEPTED UPDATED")]
    tight = flips(commands, now, now.with_candidate(rules(1), switch_ms), S)
    assert [(f.command_id, f.direction, f.rule, f.reason) for f in tight] == [
        ("u1", "accepted->rejected", "t:small", "RULE_VIOLATED")]
    assert flips(commands, now, now.with_candidate(IN_FORCE, switch_ms), S) == []  # the same rules flip nothing

    report = WhatIfReport(len(commands), switch_ms, rules_digest(rules(100)), tuple(loose)).as_dict()
    assert (report["flips"], report["rejected_to_accepted"], report["accepted_to_rejected"]) == (1, 1, 0)
    assert report["rules"]["t:small"]["by"] == {"rejected->accepted RULE_VIOLATED": 1}
