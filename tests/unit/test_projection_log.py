"""The log projection's lines: one JSON object per decision, with outcome, reason and end-to-end latency."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

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


def _items() -> list[Item]:
    created = decide(None, CreateObject("c1", "o", "alice", T, document="{}"))
    return [Item(_rec(i), created.outcome) for i in range(3)]


def test_a_write_that_fails_raises_so_the_batch_is_not_committed() -> None:
    """/dev/full: every write fails with ENOSPC, as on a full disk. logging's handler printed it and went on."""
    proj = LogProjection(Path("/dev/full"), clock=lambda: T)
    with pytest.raises(OSError) as failed:
        proj.apply(_items())
    assert failed.value.errno == errno.ENOSPC
    with contextlib.suppress(OSError):  # closing flushes what is buffered: /dev/full refuses that too
        proj.close()


def test_an_io_error_at_the_file_object_raises(tmp_path: Path) -> None:
    proj = LogProjection(tmp_path / "decisions.log", clock=lambda: T)
    proj.apply(_items()[:1])
    handler = proj._handler
    assert handler is not None and handler.stream is not None

    class Failing(io.TextIOWrapper):
        def write(self, s: str) -> int:
            raise OSError(errno.EIO, "Input/output error")

    real = handler.stream
    handler.stream = Failing(io.BytesIO(), encoding="utf-8")
    with pytest.raises(OSError, match="Input/output error"):
        proj.apply(_items())
    handler.stream = real
    proj.close()


def test_a_batch_is_fsynced_before_apply_returns_and_after_a_rotation_its_directory(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "decisions.log"
    proj = LogProjection(path, max_bytes=4000, backups=3, clock=lambda: T)
    proj.apply(_items())
    assert synced == [str(path)], "one fsync per batch, before apply returns (the runner commits after it)"
    synced.clear()
    proj.apply(_items() * 10)  # past 4000 bytes: rotated mid-batch
    assert (tmp_path / "decisions.log.1").exists()
    assert synced == [str(path), str(path), str(tmp_path)], "the rotated-out file, the new one, then their names"
    proj.close()
    unsynced = LogProjection(tmp_path / "other.log", clock=lambda: T, sync=False)
    synced.clear()
    unsynced.apply(_items())
    assert synced == []
    unsynced.close()
