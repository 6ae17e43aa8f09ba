"""The team's rules through the API on the real pipeline (API, broker, the Spark validator, the audit projection):
the status page and ``/metrics`` show the rules version per partition and rejections per rule, and once the audit
trail knows an order, its owner's patch that the type's patch schema refuses is answered 422 early, never produced."""

from __future__ import annotations

import time

import pytest

from app.api.callers.auth import OPERATE, READ, RULES
from app.read_models import audit_root
from app.run.scenario import ORDERS
from app.settings import Settings
from app.validator.job import drain
from app.validator.murmur2 import partition_for
from app.validator.topic_io import read_all
from projections.audit import AuditProjection
from projections.audit.deploys import decode_audited
from projections.runner import Runner, RunnerConfig
from tests.integration.test_api_support import api_client, auth, is_problem

pytestmark = pytest.mark.integration

DOC = {"title": "chairs", "priority": 3, "customer": "acme", "amount": 500, "status": "draft"}


def test_rule_decisions_show_on_the_status_page_and_metrics_and_a_known_orders_bad_patch_is_refused_early(
        spark, settings: Settings) -> None:  # noqa: ANN001
    s = settings
    with api_client(s) as client:
        put = client.put("/rules", content=ORDERS.read_text(),
                         headers={**auth(s, "ops", scopes=(RULES, READ)), "Content-Type": "application/yaml"})
        assert put.status_code == 201, put.text
        version = put.json()["version"]
        alice = auth(s)
        created = client.post("/objects", json={"id": "po", "type": "order", "document": DOC}, headers=alice)
        assert created.status_code == 202, created.text
        skip = client.patch("/objects/po", json={"status": "approved"}, headers=alice)  # the schema allows it
        assert skip.status_code == 202, skip.text  # ... the validator's transition refuses it
        drain(spark, s, timeout=240)

        operator, partition = auth(s, "operator", (OPERATE,)), partition_for(b"po", s.partitions)
        deadline = time.monotonic() + 30
        while True:  # the app's outcome consumer reads the validator's decisions from the topics
            page = client.get("/status.json", headers=operator).json()
            shown = (page["rules_version_by_partition"].get(str(partition)), page["rejections_by_rule"])
            if shown[0] == version and shown[1].get(f"order:status-flow (v{version})") == 1:
                break
            assert time.monotonic() < deadline, (shown, page)
            time.sleep(0.5)
        metrics = client.get("/metrics", headers=operator).text
        assert f'arbiter_rules_version{{partition="{partition}"}} {version}.0' in metrics, metrics
        assert (f'arbiter_api_rule_rejections_total{{rule="order:status-flow",rules_version="{version}"}} 1.0'
                in metrics), metrics

        cfg = RunnerConfig(bootstrap=s.kafka_bootstrap, topics=(s.topic_events, s.topic_rejections, s.rules_topic),
                           group_id="t-audit", stop_when_caught_up=True, lag_interval_s=60)
        Runner(cfg, AuditProjection(audit_root(s), sync=False), decode_audited).run()
        before = len(read_all(s, s.topic_commands))
        refused = client.patch("/objects/po", json={"priority": 9}, headers=alice)
        body = is_problem(refused, 422, "RULE_VIOLATED")
        assert (body["rule"], body["rule_pointers"], body["rules_version"]) == ("order:patch_schema", ["/priority"],
                                                                                version)
        assert refused.headers["arbiter-rules-version"] == str(version)
        assert len(read_all(s, s.topic_commands)) == before  # refused early: never produced
        other = client.patch("/objects/po", json={"priority": 9}, headers=auth(s, "bob"))
        assert other.status_code == 202, other.text  # not the owner the audit trail knows: the validator decides
