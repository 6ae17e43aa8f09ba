"""A rule in warn mode on the real pipeline (API, broker, the Spark validator): the command it would refuse is
accepted, its event on the topic carries the warning, the status page and ``/metrics`` count it; promoted to
enforce (a new version), the same move is refused, naming the new version; ``arbiter verify replay`` re-decides the
whole history clean (issue 52)."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from app.api.callers.auth import OPERATE, READ, RULES
from app.run.scenario import ORDERS
from app.settings import Settings
from app.validator.job import drain
from app.validator.topic_io import read_all
from commands import Event, Rejection
from schemas import codec
from tests.integration.test_api_support import api_client, auth
from tests.integration.test_rules_params_pipeline import _cli

pytestmark = pytest.mark.integration

DOC = {"title": "chairs", "priority": 3, "customer": "acme", "amount": 500, "status": "draft"}


def _document(mode: str) -> str:
    doc = yaml.safe_load(ORDERS.read_text())
    doc.pop("tests", None)  # its cases expect the enforced rules
    doc["types"]["order"]["transitions"][0]["mode"] = mode
    return yaml.safe_dump(doc)


def test_a_warn_mode_rule_lets_a_move_pass_with_a_warning_and_its_promotion_refuses_it(
        spark, settings: Settings) -> None:  # noqa: ANN001
    s = settings
    ops = {**auth(s, "ops", scopes=(RULES, READ)), "Content-Type": "application/yaml"}
    with api_client(s) as client:
        put = client.put("/rules", content=_document("warn"), headers=ops)
        assert put.status_code == 201, put.text
        watching = put.json()["version"]
        alice = auth(s)
        for oid in ("w1", "w2"):
            created = client.post("/objects", json={"id": oid, "type": "order", "document": DOC}, headers=alice)
            assert created.status_code == 202, created.text
        skip = client.patch("/objects/w1", json={"status": "approved"}, headers=alice)
        assert skip.status_code == 202, skip.text
        drain(spark, s, timeout=240)

        events = [codec.decode_outcome(r.value) for r in read_all(s, s.topic_events)]
        warned = [e for e in events if isinstance(e, Event) and e.object_id == "w1" and e.version == 2]
        assert len(warned) == 1 and warned[0].rules_version == watching
        assert [(w.rule, w.mode, w.reason, w.pointers) for w in warned[0].warnings] == [
            ("order:status-flow", "warn", "RULE_VIOLATED", ("/status",))]

        operator = auth(s, "operator", (OPERATE,))
        deadline = time.monotonic() + 30
        while True:  # the app's outcome consumer reads the validator's decisions from the topics
            page = client.get("/status.json", headers=operator).json()
            if page.get("warnings_by_rule", {}).get(f"order:status-flow (v{watching}, warn)") == 1:
                break
            assert time.monotonic() < deadline, page
            time.sleep(0.5)
        metrics = client.get("/metrics", headers=operator).text
        assert (f'arbiter_api_rule_warnings_total{{mode="warn",rule="order:status-flow",rules_version="{watching}"}}'
                ' 1.0') in metrics, metrics

        put = client.put("/rules", content=_document("enforce"), headers=ops)
        assert put.status_code == 201, put.text
        enforcing = put.json()["version"]
        assert enforcing == watching + 1
        again = client.patch("/objects/w2", json={"status": "approved"}, headers=alice)
        assert again.status_code == 202, again.text
        drain(spark, s, timeout=240)
        refused = [r for r in (codec.decode_outcome(x.value) for x in read_all(s, s.topic_rejections))
                   if isinstance(r, Rejection) and r.object_id == "w2"]
        assert [(r.rule, r.rules_version) for r in refused] == [("order:status-flow", enforcing)]

    # the whole history, the watching version's warning and the promotion's refusal, re-decided: no divergence
    archived = _cli(s, "archive", "run", "--once")
    assert archived.returncode == 0, archived.stdout[-2000:] + archived.stderr[-3000:]
    replay = _cli(s, "verify", "replay", "--json")
    assert replay.returncode == 0, replay.stdout[-4000:] + replay.stderr[-3000:]
    summary = json.loads(replay.stdout.strip().splitlines()[-1])
    assert summary["divergences"] == 0 and {watching, enforcing} <= {int(v) for v in summary["rules_versions"]}, summary
