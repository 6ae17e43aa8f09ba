"""docker-compose.yml read without an engine (the stack itself runs in tests/integration/test_compose_demo.py)."""

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


# --- issue 35 item 11: each container gets only the secrets its role needs ----------------------------------------

#: The services whose role needs ARBITER_AUTH_SECRET: the API signs command records with the key derived from it,
#: the validator checks their signatures (its Spark tasks get the derived key only: Settings.for_tasks).
SECRET_HOLDERS = {"api", "validator"}
#: The services that hold the development issuer's key pair: the API (it verifies and mints tokens) and the
#: observability profile's metrics-token (it mints Prometheus's).
ISSUERS = {"api", "metrics-token"}


def _env(svc: dict[str, object]) -> dict[str, str]:
    env = svc.get("environment") or {}
    assert isinstance(env, dict)
    return env


def test_only_the_api_and_the_validator_get_the_auth_secret() -> None:
    assert "ARBITER_AUTH_SECRET" not in COMPOSE["x-arbiter"]["environment"]
    holders = {n for n, s in SERVICES.items() if "ARBITER_AUTH_SECRET" in _env(s)}
    assert holders == SECRET_HOLDERS


def test_the_issuers_key_pair_is_mounted_only_where_tokens_are_minted_or_verified() -> None:
    from app.api.callers.identity import identity_dir

    path = str(identity_dir(Settings(var_dir=Path(COMPOSE["x-arbiter"]["environment"]["ARBITER_VAR_DIR"]))))
    mounted = {n for n, s in SERVICES.items() if any(str(v).split(":")[1] == path for v in s.get("volumes") or [])}
    assert mounted == ISSUERS
    for name in ISSUERS:
        volume = next(str(v).split(":")[0] for v in SERVICES[name]["volumes"] if str(v).split(":")[1] == path)
        assert volume in COMPOSE["volumes"] and volume != "arbiter-data", name  # a volume of its own
    # metrics-token does not get the shared data volume (where the key pair used to live) either
    assert all(not str(v).startswith("arbiter-data:") for v in SERVICES["metrics-token"]["volumes"])


def test_no_token_outlives_the_clis_bound() -> None:
    """The metrics token is minted for a day and renewed hourly, never for a year."""
    bound = next(m.le for m in Settings.model_fields["token_ttl_s"].metadata if hasattr(m, "le"))
    text = (ROOT / "docker-compose.yml").read_text()
    ttls = [int(t) for t in re.findall(r"--ttl\s+(\d+)", text)]
    assert ttls and max(ttls) <= bound, ttls
    assert "sleep 3600" in " ".join(SERVICES["metrics-token"]["entrypoint"])


# --- issue 38 -------------------------------------------------------------------------------------------------------

def test_kafka_keeps_its_log_dirs_on_its_volume() -> None:
    """Item 1: without KAFKA_LOG_DIRS the image writes /tmp/kafka-logs inside the container; `down` loses the topics."""
    kafka = SERVICES["kafka"]
    mounts = {str(v).split(":")[1] for v in kafka["volumes"]}
    assert kafka["environment"]["KAFKA_LOG_DIRS"] in mounts


def test_one_validator_whatever_the_profiles() -> None:
    """Item 5: `--profile cluster` used to start a second driver on the same checkpoint."""
    drivers = [n for n, s in ARBITER_SERVICES.items() if s.get("command") == ["validator"]]
    assert drivers == ["validator"]
    assert "profiles" not in SERVICES["validator"]
    assert SERVICES["validator"]["environment"]["ARBITER_SPARK_MASTER"] == "${VALIDATOR_SPARK_MASTER:-local[2]}"


def test_only_the_auth_secret_is_required_by_the_loader() -> None:
    """Item 3: `${VAR:?}` is interpolated for every service, profile or not, so only what every `up` needs may use it."""
    text = (ROOT / "docker-compose.yml").read_text()
    assert set(re.findall(r"\$\{(\w+):\?", text)) == {"ARBITER_AUTH_SECRET"}
    check = SERVICES["grafana-password"]
    assert check["profiles"] == SERVICES["grafana"]["profiles"] == ["observability"]
    assert SERVICES["grafana"]["depends_on"]["grafana-password"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", ["validator", "archive"])
def test_spark_drivers_are_healthy_only_on_fresh_progress_of_this_run(name: str) -> None:
    """Item 4: `test -f` of the progress file passed on the file a crash-looping driver's previous run left."""
    from app.archive.run import progress_path as archive_progress
    from app.validator.progress import progress_path as validator_progress

    settings = Settings(var_dir=Path(COMPOSE["x-arbiter"]["environment"]["ARBITER_VAR_DIR"]))
    path = {"validator": validator_progress, "archive": archive_progress}[name](settings)
    assert SERVICES[name]["healthcheck"]["test"] == ["CMD", "python3", "-m", "app.status.liveness", str(path)]


def test_the_build_context_leaves_out_the_checkouts_bulk() -> None:
    """Item 6: a build from a checkout where ./dev ran sent .venv (1.2 GB), .cache and var/."""
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip()
             and not ln.startswith("#")]
    assert lines[0] == "*"  # everything out, then what the Dockerfile copies back in
    copied = {ln.split()[1] for ln in (ROOT / "Dockerfile").read_text().splitlines() if ln.startswith("COPY ")}
    copied |= set((ROOT / "Dockerfile").read_text().split("COPY ", 1)[1].split("\n", 1)[0].split()[:-1])
    assert {f"!{c}" for c in copied} <= set(lines), copied
