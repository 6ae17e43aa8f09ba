"""docker-compose.yml cannot be run here (no Docker engine), so check what can be checked without one."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from app.cli import build_parser
from app.settings import PLACEHOLDER_SECRET, ROOT, Settings

pytestmark = pytest.mark.unit

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
ARBITER_SERVICES = {n: s for n, s in SERVICES.items() if s.get("image") == "arbiter:local"}


def test_arbiter_services_use_the_project_image() -> None:
    assert {"validator", "project-db", "project-audit", "project-log", "api", "archive"} <= set(ARBITER_SERVICES)
    assert (ROOT / "Dockerfile").exists()
    for name in ("app", "commands", "projections", "schemas", "build/maven"):
        assert f"COPY {name} {name}" in (ROOT / "Dockerfile").read_text(), name


@pytest.mark.parametrize("name", sorted(n for n, s in ARBITER_SERVICES.items() if "command" in s))
def test_every_service_command_is_an_arbiter_subcommand(name: str) -> None:
    argv = SERVICES[name]["command"]
    args = build_parser().parse_args(argv)  # SystemExit (a failure) if the subcommand does not exist
    assert callable(args.handler)


@pytest.mark.parametrize("name", sorted(n for n, s in ARBITER_SERVICES.items() if "entrypoint" in s))
def test_every_entrypoint_exists(name: str) -> None:
    exe = SERVICES[name]["entrypoint"][0]
    assert shutil.which(exe) or (Path(sys.executable).parent / exe).exists(), exe


def _arbiter_env() -> set[str]:
    found: set[str] = set()
    for svc in SERVICES.values():
        env = svc.get("environment") or {}
        found |= {k for k in env if k.startswith("ARBITER_")}
    entry = (ROOT / "Dockerfile").read_text()
    found |= {w.split("=")[0] for w in entry.split() if w.startswith("ARBITER_")}
    return found


def test_every_arbiter_variable_is_a_real_setting() -> None:
    fields = {f"ARBITER_{name.upper()}" for name in Settings.model_fields}
    unknown = _arbiter_env() - fields
    assert not unknown, f"docker-compose.yml / Dockerfile set variables no Setting reads: {sorted(unknown)}"


def test_depends_on_names_real_services_and_healthchecked_ones() -> None:
    for name, svc in SERVICES.items():
        deps = svc.get("depends_on") or {}
        for dep, cond in deps.items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            if cond.get("condition") == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep} to be healthy but it has no healthcheck"


def test_the_api_secret_is_required_and_has_no_default() -> None:
    """``${VAR:?message}`` makes ``docker compose up`` fail when the secret is unset or empty; any default
    (the placeholder, or anything else committed here) would be a secret everyone knows."""
    text = (ROOT / "docker-compose.yml").read_text()
    secret = SERVICES["api"]["environment"]["ARBITER_AUTH_SECRET"]
    assert re.fullmatch(r"\$\{ARBITER_AUTH_SECRET:\?[^}]+\}", secret), secret
    assert PLACEHOLDER_SECRET not in text
    for svc in SERVICES.values():
        for key, value in (svc.get("environment") or {}).items():
            if key == "ARBITER_AUTH_SECRET":
                assert ":?" in str(value) and ":-" not in str(value), value


def test_the_observability_profile_carries_traces_from_every_service_to_jaeger() -> None:
    """The services' OTLP endpoint is the collector's HTTP receiver, the collector's config is mounted where it is
    read and exports to Jaeger's OTLP receiver; tracing stays off unless ARBITER_TRACES is set (docs/operations/traces.md)."""
    collector, jaeger = SERVICES["otel-collector"], SERVICES["jaeger"]
    assert collector["profiles"] == jaeger["profiles"] == ["observability"]
    config_path = collector["command"][0].removeprefix("--config=")
    [mount] = [v for v in collector["volumes"] if v.endswith(f":{config_path}:ro")]
    config = yaml.safe_load((ROOT / mount.split(":")[0]).read_text())
    receiver = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    exporters = config["service"]["pipelines"]["traces"]["exporters"]
    assert config["service"]["pipelines"]["traces"]["receivers"] == ["otlp"]
    assert [config["exporters"][e]["endpoint"] for e in exporters] == ["jaeger:4317"]
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    for name in ("validator", "project-db", "project-audit", "project-log", "api"):
        env = SERVICES[name].get("environment") or COMPOSE["x-arbiter"]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://otel-collector:{receiver.rsplit(':', 1)[1]}", name
        assert env["ARBITER_TRACES"] == "${ARBITER_TRACES:-false}", name
