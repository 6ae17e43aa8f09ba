"""The log projection's lines: one JSON object per decision, with outcome, reason and end-to-end latency."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from commands import CreateObject, UpdateObject, decide
from projections.log import LogProjection
from projections.runner import Item, Record

pytestmark = pytest.mark.unit
T = datetime(2026, 1, 1, tzinfo=UTC)


def _rec(offset: int, key: bytes | None = b"o") -> Record:
    return Record("events", 2, offset, key, b"...", 0)


def test_one_line_per_decision_with_latency(tmp_path) -> None:  # noqa: ANN001
    created = decide(None, CreateObject("c1", "o", "alice", T, document="{}"))
    rejected = decide(created.state, UpdateObject("c2", "o", "alice", T + timedelta(seconds=1), 7, patch="{}"))
    items = [Item(_rec(0), created.outcome), Item(_rec(1), rejected.outcome), Item(_rec(2, b"x"), None, "MALFORMED: junk")]
    out = io.StringIO()
    proj = LogProjection(stream=out, clock=lambda: T + timedelta(seconds=2, milliseconds=500))
    proj.apply(items)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["outcome"] for x in lines] == ["ACCEPTED", "REJECTED", "UNDECODABLE"]
    assert lines[0] | {"ts": None} == {"ts": None, "topic": "events", "partition": 2, "offset": 0, "command_id": "c1",
                                       "object_id": "o", "principal": "alice", "outcome": "ACCEPTED",
                                       "event": "CREATED", "version": 1, "reason": None, "latency_ms": 2500.0}
    assert (lines[1]["reason"], lines[1]["latency_ms"], lines[1]["command_id"]) == ("VERSION_CONFLICT", 1500.0, "c2")
    assert (lines[2]["reason"], lines[2]["object_id"], lines[2]["offset"]) == ("MALFORMED: junk", "x", 2)

    path = tmp_path / "log" / "decisions.log"
    rotating = LogProjection(path, max_bytes=1024, backups=2, clock=lambda: T)
    for _ in range(20):
        rotating.apply(items)
    rotating.close()
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["decisions.log", "decisions.log.1", "decisions.log.2"]
    assert all(json.loads(x) for x in path.read_text().splitlines())
