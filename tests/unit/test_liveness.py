"""The validator's and archive's container healthcheck (app/status/liveness.py) and the heartbeat it reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.status import liveness
from app.validator import progress

pytestmark = pytest.mark.unit


def _file(tmp_path: Path, mtime: float) -> Path:
    f = tmp_path / "validator-progress.json"
    f.write_text("{}")
    os.utime(f, (mtime, mtime))
    return f


def test_a_file_left_by_the_previous_run_is_not_health(tmp_path: Path) -> None:
    """Issue 38 item 4: the file survives on the volume; a process started after it was written is not vouched for."""
    f = _file(tmp_path, 1000.0)
    assert "before this process started" in (liveness.problem(f, since=1010.0, max_age_s=60, now=1011.0) or "")
    assert liveness.problem(f, since=999.5, max_age_s=60, now=1011.0) is None  # within the second of slack


def test_a_file_not_touched_for_longer_than_max_age_is_not_health(tmp_path: Path) -> None:
    f = _file(tmp_path, 1000.0)
    assert liveness.problem(f, since=900.0, max_age_s=60, now=1060.0) is None
    assert "61 s ago" in (liveness.problem(f, since=900.0, max_age_s=60, now=1061.0) or "")


def test_a_missing_file_is_not_health(tmp_path: Path) -> None:
    assert "does not exist" in (liveness.problem(tmp_path / "x", since=0, max_age_s=60, now=1) or "")


def test_start_time_from_proc(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    # the command name may hold spaces and parentheses; field 22 is counted after the last ')'
    fields = ["S"] + ["0"] * 18 + [str(250 * os.sysconf("SC_CLK_TCK"))] + ["0"] * 5
    (tmp_path / "7" / "stat").write_text("7 (a (b) c) " + " ".join(fields) + "\n")
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n")
    assert liveness.started_at(7, proc=tmp_path) == 1700000250.0


def test_started_at_reads_this_process() -> None:
    import time

    assert 0 <= time.time() - liveness.started_at(os.getpid()) < 24 * 3600


class _Query:
    name = "q"
    isActive = True  # noqa: N815 - pyspark's attribute
    lastProgress = None  # noqa: N815


def test_the_watch_touches_the_progress_file_while_its_query_is_active(tmp_path: Path) -> None:
    f = _file(tmp_path, 1000.0)
    watch = progress.QueryWatch(_Query(), f, interval_s=0.01)
    try:
        import time

        deadline = time.monotonic() + 5
        while f.stat().st_mtime == 1000.0 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watch.stop()
    assert f.stat().st_mtime > 1000.0
