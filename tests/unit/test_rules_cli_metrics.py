"""``arbiter rules check`` reports and exits non-zero on problems; the API's metrics count rejections per rule and the
newest rules version per partition."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.api.metrics import ApiMetrics
from app.cli import main
from app.run.scenario import ORDERS
from commands import Event, EventType, ReasonCode, Rejection

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def test_rules_check_reports_ok_for_the_example_and_each_problem_with_its_pointer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "check", str(ORDERS)]) == 0
    assert "OK, digest sha256:" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(ORDERS.read_text().replace("maximum: 5", "maximum: five"))
    assert main(["rules", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "/types/order/create_schema" in err and "not deployable" in err
    assert main(["rules", "check", str(tmp_path / "missing.yaml")]) == 2


def test_metrics_count_rejections_per_rule_and_keep_the_newest_version_per_partition() -> None:
    m = ApiMetrics()
    refused = Rejection("r1", ReasonCode.RULE_VIOLATED, "no", command_id="c1", object_id="o1", principal="alice",
                        rules_version=2, rule="order:status-flow", rule_message="never back")
    accepted = Event("e1", EventType.UPDATED, "o1", 3, "c2", "alice", T0, "alice", patch="{}", rules_version=3)
    older = Event("e2", EventType.UPDATED, "o2", 3, "c3", "alice", T0, "alice", patch="{}", rules_version=1)
    for o, p in ((refused, 1), (refused, 1), (accepted, 1), (older, 1), (accepted, None)):
        m.outcome(o, p)
    text = m.render().decode()
    assert 'arbiter_api_rule_rejections_total{rule="order:status-flow",rules_version="2"} 2.0' in text
    assert 'arbiter_rules_version{partition="1"} 3.0' in text  # an older version seen later does not lower it
