"""The metric table of docs/operations/metrics.md names every metric the API, the validator and the projections
export, with its type, and nothing else."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric

from app.api.telemetry.metrics import ApiMetrics
from app.metrics.projections import PROJECTION_COUNTERS, ProjectionCollector
from app.settings import Settings
from app.validator.metrics import ValidatorCollector
from app.validator.progress import progress_path, write_progress
from app.validator.rocks.stats import COUNTERS, GAUGES, file_prefix, stats_dir
from projections.runner import Projection, Runner, RunnerConfig

pytestmark = pytest.mark.unit

TABLE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "metrics.md"  # the metrics page


def exported(metrics: Iterable[Metric]) -> dict[str, str]:
    """Name as scraped (counters with ``_total``) -> type."""
    return {m.name + ("_total" if m.type == "counter" else ""): m.type for m in metrics}


def documented() -> dict[str, str]:
    rows = re.findall(r"^\| `(arbiter_[a-z_]+)` \| (counter|gauge|histogram) \|", TABLE.read_text(), re.M)
    return dict(rows)


class EveryFigure(Projection):
    name = "db"

    def figures(self) -> dict[str, int]:
        return dict.fromkeys(PROJECTION_COUNTERS, 1)


def test_the_readme_table_is_what_the_code_exports(tmp_path: Path) -> None:
    found: dict[str, str] = {}
    found |= exported(ApiMetrics().registry.collect())
    for backend in ("spark", "rocksdb"):
        s = Settings(var_dir=tmp_path / backend, state_backend=backend, checkpoint_location=str(tmp_path / "ck"))
        write_progress(progress_path(s), {
            "batchId": 3, "numInputRows": 5, "processedRowsPerSecond": 1.0, "durationMs": {"triggerExecution": 9},
            "timestamp": "2026-11-23T14:00:00.000Z",
            "sources": [{"endOffset": {s.topic_commands: {"0": 5}}, "latestOffset": {s.topic_commands: {"0": 8}}}],
            "stateOperators": [{"numRowsTotal": 1, "memoryUsedBytes": 1}] if backend == "spark" else []})
        stats_dir(s).mkdir(parents=True)
        (stats_dir(s) / f"{file_prefix(s)}0.json").write_text(json.dumps(
            {"pid": 0, "socket": "x", "updated_at_ms": 1, "block_cache_usage_bytes": 1,
             "shards": {"0": dict.fromkeys((*GAUGES, *COUNTERS, "last_batch", "events_out", "rejections_out"), 1)}}))
        found |= exported(ValidatorCollector(s).collect())
    found |= exported(ProjectionCollector(Runner(RunnerConfig("127.0.0.1:1", ("t",), "g"), EveryFigure())).collect())
    assert "arbiter_shard_state_rows" in found and "arbiter_validator_state_rows" in found
    lag = {m.samples[0].value for m in ValidatorCollector(s).collect() if m.name == "arbiter_validator_lag"}
    assert lag == {3}
    table = documented()
    assert {n: t for n, t in found.items() if table.get(n) != t} == {}, "exported but not in the metrics page's table"
    assert sorted(set(table) - set(found)) == [], "in the metrics page's table but not exported"
