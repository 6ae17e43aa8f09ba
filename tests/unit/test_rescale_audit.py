"""Rescales in the audit trail: each generation record is chained, not counted undecodable, and ``arbiter audit
show arbiter:generation`` names each step (writes paused, a new generation current), who ran it and when."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from commands import CreateObject, decide
from projections.audit import AuditProjection, history
from projections.audit.deploys import decode_audited
from projections.runner import Item
from projections.runner import Record as RunnerRecord
from schemas import codec
from schemas.codec import DecodeError
from schemas.generations import KEY, Generation, generation_record

pytestmark = pytest.mark.unit

G0_PAUSED = Generation(0, "commands", 8, "/c", True, "2026-11-26T14:00:00+00:00", "cli:ops")
G1 = Generation(1, "commands.g1", 12, "/c/generations/g1", False, "2026-11-26T14:00:09+00:00", "cli:ops")


def test_a_generation_record_decodes_to_no_decision_and_lookalikes_still_fail() -> None:
    assert generation_record(G1.dumps()) == G1 and decode_audited(G1.dumps()) is None
    event = decide(None, CreateObject("c", "o", "alice", datetime.fromisoformat(G1.at), document="{}")).outcome
    assert decode_audited(codec.encode_event(event)) == event  # type: ignore[arg-type]
    many = G1.dumps().replace(b'"partitions": 12', b'"partitions": "many"')
    for junk in (b'{"number": 1}', G1.dumps().replace(b'"by"', b'"who"'), many, b"[]", b"\x00\x00\x00\x00\x63garbage"):
        assert generation_record(junk) is None
        with pytest.raises(DecodeError):
            decode_audited(junk)


def test_audit_show_names_each_rescale_step_who_ran_it_and_when(tmp_path: Path) -> None:
    path = tmp_path / "audit"
    proj = AuditProjection(path, sync=False)
    records = [G0_PAUSED, G1, replace(G1, at="not a time")]
    proj.apply([Item(RunnerRecord("commands-generations", 0, i, KEY, g.dumps(), 0), decode_audited(g.dumps()))
                for i, g in enumerate(records)])
    proj.close()
    paused, switched, odd = history(path, KEY.decode())
    assert (paused.outcome, paused.version, paused.principal) == ("PAUSED", 0, "cli:ops")
    assert (switched.outcome, switched.version, switched.principal) == ("RESCALED", 1, "cli:ops")
    assert switched.occurred_at is not None and switched.occurred_at.isoformat() == G1.at
    assert "commands.g1, 12 partitions" in switched.detail and "RESCALED" in str(switched)
    assert odd.outcome == "RESCALED" and odd.occurred_at is None  # a bad time is shown as "-", never a crash
