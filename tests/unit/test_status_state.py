"""The validator's state figures on the status page and the progress line: Spark's state operators for the reference
backend, the shard servers' own files (written by a real server here) for rocksdb, and "unknown" rather than zero."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app.status.collector import StatusCollector
from app.validator.progress import STATE_KEY, add_state, add_state_source, summary
from app.validator.rocks.client import ShardClient
from app.validator.rocks.stats import MIB, file_prefix, rocks_state, stats_dir
from tests.unit.test_rocks_job import NOW
from tests.unit.test_rocks_server import batches, rows, server_pids, settings_at, stop_servers

pytestmark = pytest.mark.unit


def test_rocksdb_state_comes_from_a_real_shard_servers_file_and_memory_is_unknown_once_it_stops(tmp_path: Path) -> None:
    ck = str(tmp_path / "ck")
    s = settings_at(tmp_path, "var", snapshot_every=2, checkpoint_location=ck)
    collector = StatusCollector(s)
    assert collector._validator() == {}, "no progress and no shard figures: nothing to show, not zeros"
    # Another checkpoint's server in the same var dir is not ours.
    stats_dir(s).mkdir(parents=True)
    (stats_dir(s) / "shards-0123456789abcdef0123-0.json").write_text(json.dumps(
        {"pid": 1, "socket": "x", "updated_at_ms": 1, "block_cache_usage_bytes": 5,
         "shards": {"5": {"rows_estimate": 10**9, "batches": 10**9}}}))
    parts = batches(2)
    try:
        for b, part in enumerate(parts):
            ShardClient(s, ck).run_all(b, NOW, [(0, rows(part))])
        deadline = time.monotonic() + 10
        while not list(stats_dir(s).glob(file_prefix(s) + "*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        live = collector._state({})
        assert live is not None and live["source"] == "rocksdb shard servers"
        assert 0 < live["rows"] < 10**9 and live["sst_bytes"] >= 0 and live["servers_live"] == 1
        assert live["memory_bytes"] is not None and live["memory_bytes"] > 0
        assert live["memory_limit_bytes"] == 16 * MIB and live["write_buffer_limit_bytes"] == 4 * MIB
        stop_servers(s, ck)  # it writes its figures once more as it stops
        while server_pids(s, ck) and time.monotonic() < deadline + 15:
            time.sleep(0.05)
        gone = collector._state({})
    finally:
        stop_servers(s, ck)
    assert gone is not None and gone["servers_live"] == 0
    assert gone["batches"] == 2 and gone["records"] == sum(len(p) for p in parts)
    assert gone["snapshots"] == 1 and gone["snapshot_bytes"] > 0 and gone["changelog_bytes"] > 0
    assert gone["rows"] > 0, "the rows are on disk whether or not a server holds them"
    assert gone["memory_bytes"] is None and gone["memtable_bytes"] is None, "the cache went with the process"

    # The progress line and file carry the same sums (the driver registers the source for the rocksdb backend).
    path = tmp_path / "progress.json"
    add_state_source(path, lambda: rocks_state(s))
    progress = add_state(path, {"batchId": 1, "numInputRows": 60})
    assert progress[STATE_KEY]["rows_estimate"] == gone["rows"]
    line = summary(progress)
    assert f"state_rows={gone['rows']} " in line and "state_memory_bytes=unknown" in line, line


def test_the_reference_backend_keeps_sparks_state_operator_figures(tmp_path: Path) -> None:
    s = settings_at(tmp_path, "var", state_backend="spark")
    progress = {"batchId": 3, "stateOperators": [{"numRowsTotal": 7, "memoryUsedBytes": 4096,
                                                  "customMetrics": {"numValuesRemovedDueToTTLExpiry": 2}}]}
    assert StatusCollector(s)._state(progress) == {"source": "spark state operators", "rows": 7, "memory_bytes": 4096,
                                                   "ttl_evictions_last_batch": 2}


def test_without_figures_the_line_says_unknown_not_zero() -> None:
    assert summary({"batchId": 0}).endswith("state=unknown")
