"""A parameter deploy on the real pipeline (API, broker, the Spark validator, the archive, verify replay): the order
example's approval limit as a parameter refuses an approval, the rules page's parameter block (what-if first, then
``arbiter rules params deploy``) raises it mid-stream, the same approval is accepted from the control record's offset
on naming the new version, and ``arbiter verify replay`` re-decides the whole history clean (issue 52)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from app.api.callers.auth import READ, RULES
from app.settings import Settings
from app.validator.job import drain
from app.validator.topic_io import read_all
from commands import Event, Rejection
from schemas import codec
from tests.docs_snippets import ROOT, run_shell
from tests.integration.played_run import run_env
from tests.integration.test_api_support import api_client, auth

pytestmark = pytest.mark.integration

PARAMS_DOC = (ROOT / "docs" / "examples" / "rules" / "orders-params.yaml").read_text()
DOC = {"title": "desks", "priority": 2, "customer": "acme", "amount": 20000, "status": "draft"}
RULE = "order:finance-approves-large"


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=run_env(settings, 0), text=True,
                          capture_output=True, timeout=900, check=False, cwd=ROOT)


def _outcomes(s: Settings, object_id: str) -> list[Event | Rejection]:
    found = [codec.decode_outcome(r.value) for t in (s.topic_events, s.topic_rejections) for r in read_all(s, t)]
    return [o for o in found if isinstance(o, Event | Rejection) and o.object_id == object_id]


def test_a_parameter_deploy_flips_decisions_at_its_offset_and_replays_clean(spark, settings: Settings) -> None:  # noqa: ANN001
    s = settings
    ops = {**auth(s, "ops", scopes=(RULES, READ)), "Content-Type": "application/yaml"}
    alice = auth(s)
    with api_client(s) as client:
        put = client.put("/rules", content=PARAMS_DOC, headers=ops)
        assert put.status_code == 201, put.text
        first = put.json()["version"]
        for oid in ("p1", "p2"):
            created = client.post("/objects", json={"id": oid, "type": "order", "document": DOC}, headers=alice)
            assert created.status_code == 202, created.text
            submitted = client.patch(f"/objects/{oid}", json={"status": "submitted"}, headers=alice)
            assert submitted.status_code == 202, submitted.text
        before = client.patch("/objects/p1", json={"status": "approved"}, headers=alice)
        assert before.status_code == 202, before.text
        drain(spark, s, timeout=240)
        refused = [o for o in _outcomes(s, "p1") if isinstance(o, Rejection)]
        assert [(r.rule, r.rule_message, r.rules_version) for r in refused] == [
            (RULE, "approval over 10000 needs finance", first)]

        out = run_shell("rules-params.sh", run_env(s, 0))  # archive, show, what-if --params, params deploy
        shown, report = (json.loads(line) for line in out.splitlines() if line.startswith("{"))
        assert shown["parameters"] == {"finance_limit": 10000} and shown["version"] == first, shown
        flips = report["rules"][RULE]["samples"]
        assert [(f["object_id"], f["direction"]) for f in flips] == [("p1", "rejected->accepted")], report
        assert f"rules version {first + 1} (" in out and "deployed, deployed_by cli:" in out, out

        for oid in ("p1", "p2"):  # after the parameter deploy's control record: the raised limit decides
            again = client.patch(f"/objects/{oid}", json={"status": "approved"}, headers=alice)
            assert again.status_code == 202, again.text
        drain(spark, s, timeout=240)
    for oid in ("p1", "p2"):
        approved = [o for o in _outcomes(s, oid) if isinstance(o, Event) and o.version == 3]
        assert [e.rules_version for e in approved] == [first + 1], _outcomes(s, oid)

    archived = _cli(s, "archive", "run", "--once")
    assert archived.returncode == 0, archived.stdout[-2000:] + archived.stderr[-3000:]
    replay = _cli(s, "verify", "replay", "--json")
    assert replay.returncode == 0, replay.stdout[-4000:] + replay.stderr[-3000:]
    summary = json.loads(replay.stdout.strip().splitlines()[-1])
    assert summary["divergences"] == 0 and summary["commands"] >= 7, summary
    assert {first, first + 1} <= {int(v) for v in summary["rules_versions"]}, summary
