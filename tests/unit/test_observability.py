"""docker compose --profile observability: Prometheus' scrape configuration and alert rules, Grafana's provisioning
and dashboard. No Docker engine, Prometheus or Grafana runs here, so parse them and check what can be checked:
every target is a service on the port its setting gives, every metric a rule or panel uses is one the code exports
(docs/operations/metrics.md's table, held to the code by test_metrics_names), the PromQL is balanced, and the files
are mounted where the configuration looks for them. Not checked: PromQL semantics (no PromQL parser here)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import ROOT, Settings
from tests.unit.test_metrics_names import documented

pytestmark = pytest.mark.unit

OPS = ROOT / "ops"
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PROMETHEUS = yaml.safe_load((OPS / "prometheus" / "prometheus.yml").read_text())
ALERTS = yaml.safe_load((OPS / "prometheus" / "alerts.yml").read_text())
DASHBOARD = json.loads((OPS / "grafana" / "dashboards" / "arbiter.json").read_text())
DURATION = re.compile(r"^\d+[smhd]$")


def mounted(service: str, host_path: Path) -> str:
    """Return where ``service`` mounts the host directory ``host_path`` (relative bind mounts in the compose file)."""
    for vol in SERVICES[service].get("volumes", []):
        src, dst = vol.split(":")[:2]
        if (ROOT / src).resolve() == host_path.resolve():
            return dst
    raise AssertionError(f"{service} does not mount {host_path}")


def metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\barbiter_[a-z_]+", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count")) else n for n in names}


def balanced(expr: str) -> bool:
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in re.sub(r'"[^"]*"', "", expr):
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack


def expressions() -> list[tuple[str, str]]:
    rules = [(r["alert"], r["expr"]) for g in ALERTS["groups"] for r in g["rules"]]
    panels = [(p["title"], t["expr"]) for p in DASHBOARD["panels"] for t in p["targets"]]
    return rules + panels


def test_the_profile_adds_prometheus_and_grafana_and_components_listen_on_the_network() -> None:
    for name in ("prometheus", "grafana", "metrics-token"):
        assert SERVICES[name]["profiles"] == ["observability"], name
    assert SERVICES["validator"]["environment"]["ARBITER_METRICS_HOST"] == "0.0.0.0"  # noqa: S104 - compose network
    assert mounted("prometheus", OPS / "prometheus") == "/etc/prometheus"
    published = [p for s in ("validator", "project-db", "project-audit", "project-log") for p in SERVICES[s].get("ports", [])]
    assert not published, "metrics without a token stay on the compose network"


def test_prometheus_scrapes_every_component_on_its_settings_port() -> None:
    s = Settings()
    want = {"validator": s.validator_metrics_port, "api": s.api_port,
            **{f"project-{k}": port for k, port in s.projection_metrics_ports.items()}}
    got: dict[str, int] = {}
    for job in PROMETHEUS["scrape_configs"]:
        for sc in job["static_configs"]:
            for target in sc["targets"]:
                host, port = target.rsplit(":", 1)
                assert host in SERVICES, target
                got[host] = int(port)
    assert got == want
    assert DURATION.match(PROMETHEUS["global"]["scrape_interval"])
    (rule_file,) = PROMETHEUS["rule_files"]
    assert Path(rule_file).name == "alerts.yml" and Path(rule_file).parent.as_posix() == "/etc/prometheus"
    api = next(j for j in PROMETHEUS["scrape_configs"] if j["job_name"] == "api")
    token = api["authorization"]["credentials_file"]
    assert any(v.split(":")[1] == str(Path(token).parent) for v in SERVICES["prometheus"]["volumes"])
    assert "> " + token in " ".join(SERVICES["metrics-token"]["entrypoint"])


def test_alert_rules_cover_the_issue_and_are_well_formed() -> None:
    rules: dict[str, dict[str, Any]] = {r["alert"]: r for g in ALERTS["groups"] for r in g["rules"]}
    assert {"ArbiterValidatorDown", "ArbiterValidatorLagGrowing", "ArbiterRejectionReasonSpike",
            "ArbiterStateMemoryNearLimit"} <= set(rules)
    assert 'up{job="validator"}' in rules["ArbiterValidatorDown"]["expr"]
    assert rules["ArbiterValidatorLagGrowing"]["for"] == "5m"
    for name, r in rules.items():
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert r["labels"]["severity"] in ("critical", "warning", "info") and r["annotations"]["summary"], name
        assert "for" not in r or DURATION.match(r["for"]), name
    jobs = {j["job_name"] for j in PROMETHEUS["scrape_configs"]}
    for name, expr in expressions():
        assert set(re.findall(r'job="([^"]+)"', expr)) <= jobs, name


@pytest.mark.parametrize(("where", "expr"), expressions(), ids=[w for w, _ in expressions()])
def test_every_rule_and_panel_uses_exported_metrics_in_balanced_promql(where: str, expr: str) -> None:
    table = documented()
    assert balanced(expr), expr
    assert metric_names(expr) <= set(table), metric_names(expr) - set(table)
    for window in re.findall(r"\[([^\]]+)\]", expr):
        assert all(DURATION.match(part) for part in window.split(":")), window
    for fn in ("rate", "increase", "deriv"):
        for arg in re.findall(fn + r"\((arbiter_[a-z_]+)", expr):
            if fn in ("rate", "increase"):
                assert table[metric_names(arg).pop()] in ("counter", "histogram"), f"{fn} of a gauge: {arg}"
            else:
                assert table[arg] == "gauge", f"deriv of a counter: {arg}"


def test_grafana_provisions_the_datasource_and_the_dashboard_it_uses() -> None:
    (ds,) = yaml.safe_load((OPS / "grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"]
    assert ds["url"] == "http://prometheus:9090" and "prometheus" in SERVICES
    uids = {p["datasource"]["uid"] for p in DASHBOARD["panels"]} | {
        t["datasource"]["uid"] for p in DASHBOARD["panels"] for t in p["targets"]}
    assert uids == {ds["uid"]}
    (provider,) = yaml.safe_load((OPS / "grafana/provisioning/dashboards/arbiter.yml").read_text())["providers"]
    assert provider["options"]["path"] == mounted("grafana", OPS / "grafana" / "dashboards")
    assert mounted("grafana", OPS / "grafana" / "provisioning") == "/etc/grafana/provisioning"
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids)) and DASHBOARD["uid"] == "arbiter-overview"
    for p in DASHBOARD["panels"]:
        assert p["targets"] and len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
