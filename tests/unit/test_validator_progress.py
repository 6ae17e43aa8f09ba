"""The per-batch progress line and the status file the API reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.validator.progress import summary, write_progress

pytestmark = pytest.mark.unit

PROGRESS = {
    "name": "arbiter-validator-commands", "batchId": 7, "numInputRows": 500, "processedRowsPerSecond": 281.4,
    "durationMs": {"triggerExecution": 1777},
    "stateOperators": [{"numRowsTotal": 1200, "memoryUsedBytes": 4096,
                        "customMetrics": {"numValuesRemovedDueToTTLExpiry": 3}}],
}


def test_one_line_names_the_batch_figures() -> None:
    assert summary(PROGRESS) == ("batch=7 input_rows=500 rows_per_s=281 duration_ms=1777 state_rows=1200 "
                                 "state_memory_bytes=4096 ttl_evictions=3")
    assert "state=unknown" in summary({"batchId": 0})


def test_progress_is_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "status" / "validator-progress.json"
    write_progress(path, PROGRESS)
    write_progress(path, {**PROGRESS, "batchId": 8})
    assert json.loads(path.read_text())["batchId"] == 8
    assert [p.name for p in path.parent.iterdir()] == [path.name]



class _Query:
    """A stand-in for a StreamingQuery: a name, its progress so far, and whether it is active."""

    name = "arbiter-validator-commands"

    def __init__(self) -> None:
        self.progress: list[dict] = []
        self.isActive = True

    @property
    def lastProgress(self):  # noqa: ANN201, N802
        return type("P", (), {"json": json.dumps(self.progress[-1])})() if self.progress else None


def test_the_watch_publishes_each_new_batch_once_and_runs_on_end_when_the_query_stops(tmp_path: Path) -> None:
    import threading

    from app.validator.progress import QueryWatch

    query, ended = _Query(), threading.Event()
    path = tmp_path / "status" / "validator-progress.json"
    watch = QueryWatch(query, path, on_end=ended.set, interval_s=0.01)
    watch.publish()
    assert not path.exists()
    query.progress.append(PROGRESS)
    watch.publish()
    assert json.loads(path.read_text())["batchId"] == 7
    path.unlink()
    watch.publish()  # the same batch again: nothing new to write
    assert not path.exists()
    query.progress.append({**PROGRESS, "batchId": 9})
    query.isActive = False
    assert ended.wait(5), "on_end did not run after the query stopped"
    assert json.loads(path.read_text())["batchId"] == 9  # the last progress is published before the end


class _GoneQuery(_Query):
    """A query whose session was stopped under its watch: every call into it raises, its name included."""

    def __init__(self) -> None:
        super().__init__()
        self.gone = False

    def __getattribute__(self, attr: str):  # noqa: ANN204
        if attr in ("name", "isActive", "lastProgress") and object.__getattribute__(self, "gone"):
            raise ConnectionRefusedError("the Py4J gateway is closed")
        return object.__getattribute__(self, attr)


def test_the_watch_ends_quietly_when_the_session_stops_under_it(tmp_path: Path) -> None:
    """Logging the query's name after the session stopped raised in the watch's thread (seen at a test session's end)."""
    import threading

    from app.validator.progress import QueryWatch

    query, ended, raised = _GoneQuery(), threading.Event(), []
    previous = threading.excepthook
    threading.excepthook = raised.append
    try:
        watch = QueryWatch(query, tmp_path / "progress.json", on_end=ended.set, interval_s=0.01)
        query.gone = True
        assert ended.wait(5), "on_end did not run after the session stopped"
        watch._thread.join(5)
    finally:
        threading.excepthook = previous
    assert not raised, raised[0].exc_value
