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
    assert "state_rows=0" in summary({"batchId": 0})


def test_progress_is_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "status" / "validator-progress.json"
    write_progress(path, PROGRESS)
    write_progress(path, {**PROGRESS, "batchId": 8})
    assert json.loads(path.read_text())["batchId"] == 8
    assert [p.name for p in path.parent.iterdir()] == [path.name]
