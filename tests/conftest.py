"""Session fixtures: one real KRaft broker, one local SparkSession, one PostgreSQL server; unique topics and
databases per test."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from pydantic import SecretStr

from app.local.kafka_broker import LocalBroker, free_port
from app.local.postgres_server import LocalPostgres
from app.settings import Settings
from app.topics import ensure_topics

hsettings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
hsettings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The caller's ARBITER_* settings must not change what the suite tests (a developer's shell often has some):
# every one is dropped here, before any Settings() is built, and child processes inherit the cleaned environment.
# The one way in is ARBITER_TEST_KAFKA_BOOTSTRAP, to reuse a running broker instead of starting one.
EXTERNAL_BROKER = os.environ.pop("ARBITER_TEST_KAFKA_BOOTSTRAP", "")
for _name in [n for n in os.environ if n.startswith("ARBITER_")]:
    del os.environ[_name]

# A skipped test proves nothing. ``./dev test`` installs what every test needs, so a skip is a failure unless the
# test is listed here with the reason it may skip on some machines.
ALLOWED_SKIPS: dict[str, str] = {
    # nodeid: why this test may skip
}
_skipped: list[tuple[str, str]] = []

#: The end-to-end checks (marked ``e2e``: they need root or Docker): CI's own step, ``./dev test --e2e``, runs them
#: with ``--require-e2e``, under which each must have run and passed: one skipped, deselected, not collected or
#: no longer marked fails the step (``tests/unit/test_tiers.py`` holds this list equal to the tests marked e2e).
E2E_CHECKS: tuple[str, ...] = (
    "tests/integration/test_compose_demo.py::test_the_compose_demo_starts_works_and_keeps_its_data",
)
_passed: set[str] = set()

#: What a run may take, wall time on 2 cores with warm caches, per tier (by the ``-m`` it ran with). Reported at the
#: end of every run, never asserted: a test that pushes the suite past it is the moment to make it share a stack
#: or wait on its condition (docs/development.md, "Keeping the suite fast").
SUITE_BUDGET_S = 900
BUDGETS_S: dict[str, tuple[str, int]] = {
    "unit": ("fast tier", 120),
    "not e2e": ("suite", SUITE_BUDGET_S),
    "e2e": ("end-to-end checks", 600),
    "unit or integration or e2e": ("suite and end-to-end checks", SUITE_BUDGET_S + 600),
}
_started = time.monotonic()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--require-e2e", action="store_true",
                     help="fail unless every test of tests/conftest.py E2E_CHECKS ran and passed")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.nodeid not in ALLOWED_SKIPS:
        _skipped.append((report.nodeid, str(report.longrepr)[-300:]))
    if report.when == "call" and report.passed:
        _passed.add(report.nodeid)


def _missing_e2e(config: pytest.Config) -> list[str]:
    return [n for n in E2E_CHECKS if n not in _passed] if config.getoption("--require-e2e") else []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if (_skipped or _missing_e2e(session.config)) and exitstatus in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for nodeid, why in _skipped:
        terminalreporter.write_line(f"SKIPPED, counted as a failure (not in tests/conftest.py ALLOWED_SKIPS): {nodeid}: "
                                    f"{why}", red=True)
    for nodeid in _missing_e2e(config):
        terminalreporter.write_line(f"END-TO-END CHECK DID NOT RUN AND PASS (--require-e2e): {nodeid}", red=True)
    wall = time.monotonic() - _started
    tier, budget = BUDGETS_S.get(config.getoption("markexpr") or "", ("this selection", 0))
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS or config.getoption("keyword"):
        tier, budget = "this selection", 0  # a budget is for a whole tier, not for some files of it
    terminalreporter.write_line(f"{tier} wall {wall:.0f} s" + (f" of budget {budget} s ({100 * wall / budget:.0f} %; "
                                "2 cores, warm caches)" if budget else ""), red=bool(budget) and wall > budget,
                                bold=True)


#: Fixtures that start a broker, Spark or PostgreSQL: a test marked ``unit`` (``./dev test --fast``) uses none of them.
INFRASTRUCTURE = frozenset({"kafka_bootstrap", "spark", "postgres"})


#: Test files whose tests share a costly session fixture, run by one pytest-xdist worker together (``./dev test``
#: distributes by ``xdist_group``): ``played_run`` is one ``arbiter run`` (a validator's and an archive's Spark start,
#: the scenario) that both files claim.
SHARED_GROUPS = {"test_pipeline_e2e.py": "played_run", "test_verify_run.py": "played_run"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a ``unit`` test that needs a broker, Spark or PostgreSQL (directly or through other fixtures); give
    every test the ``xdist_group`` of its file (``SHARED_GROUPS`` joins some), so a worker runs each file whole and
    its module fixtures are built once."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(item.path.name, item.path.name)))
    heavy = [f"{item.nodeid} uses {sorted(INFRASTRUCTURE & set(getattr(item, 'fixturenames', ())))}"
             for item in items if item.get_closest_marker("unit")
             and INFRASTRUCTURE & set(getattr(item, "fixturenames", ()))]
    if heavy:
        raise pytest.UsageError("tests marked unit must not need a broker, Spark or PostgreSQL; mark them "
                                "integration:\n" + "\n".join(heavy))


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("arbiter")


@pytest.fixture(scope="session")
def kafka_bootstrap(session_dir: Path) -> Iterator[str]:
    """A real broker for the whole session: ``ARBITER_TEST_KAFKA_BOOTSTRAP`` if set, else one we start and stop."""
    if EXTERNAL_BROKER:
        yield EXTERNAL_BROKER
        return
    broker = LocalBroker(session_dir / "kafka", port=free_port(), controller_port=free_port(), heap="512m", jit="c1")
    broker.start(Settings())
    try:
        # The validator's lease check gives a fresh broker 15 s to answer a group request; on a loaded machine the
        # first one (the group coordinator loading __consumer_offsets) can take longer than that, failing whichever
        # test comes first on start-up rather than on what it tests.
        from tests.integration.tcp_cut import group_coordinator_ready

        group_coordinator_ready(broker.bootstrap)
        yield broker.bootstrap
    finally:
        broker.stop()
        assert broker.running_pid() is None, "the test broker outlived the session"


@pytest.fixture(scope="session")
def base_settings(kafka_bootstrap: str, session_dir: Path) -> Settings:
    # Each test's checkpoint gets its own shard servers (~130 MB each); the session's JVM outlives the tests, so they
    # would idle for the default 300 s: 20 s keeps a few alive at a time instead of dozens.
    return Settings(kafka_bootstrap=kafka_bootstrap, var_dir=session_dir / "var", partitions=4, shard_server_idle_s=20)


@pytest.fixture
def settings(base_settings: Settings, tmp_path: Path) -> Settings:
    """Settings naming this test's own topics (created, 4 partitions) and its own var directory."""
    tag = uuid.uuid4().hex[:10]
    s = base_settings.model_copy(update={
        "topic_commands": f"commands-{tag}",
        "topic_events": f"events-{tag}",
        "topic_rejections": f"rejections-{tag}",
        "var_dir": tmp_path / "var",
    })
    ensure_topics(s)
    return s


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """A real PostgreSQL server for the session (Debian's binaries), started on first use, stopped by its PID.

    Its directory is outside pytest's 0700 temporary root: under root the server runs as the ``postgres`` user,
    which must be able to reach it.
    """
    top = Path(tempfile.mkdtemp(prefix="arbiter-test-pg-"))
    top.chmod(0o755)
    server = LocalPostgres(top / "pg", port=free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        assert server.running_pid() is None, "the test PostgreSQL server outlived the session"
        shutil.rmtree(top, ignore_errors=True)


@contextmanager
def read_model_on(kind: str, settings: Settings, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """``settings`` with the read model on ``kind``: rocksdb under its var dir, or a fresh PostgreSQL database."""
    if kind == "rocksdb":
        yield settings.model_copy(update={"read_model": "rocksdb"})
        return
    assert kind == "postgresql", kind
    server: LocalPostgres = request.getfixturevalue("postgres")
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = server.create_database(name)
    try:
        yield settings.model_copy(update={"read_model": "postgresql", "postgres_dsn": SecretStr(dsn)})
    finally:
        server.drop_database(name)


READ_MODELS = ["rocksdb", "postgresql"]


@pytest.fixture
def read_model_settings(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Settings]:
    """This test's settings on one read-model backend: parametrize it with ``READ_MODELS``, ``indirect=True``."""
    with read_model_on(request.param, settings, request) as s:
        yield s


@pytest.fixture(scope="session")
def spark(base_settings: Settings):  # noqa: ANN201
    """One local[2] SparkSession for the session, with the Kafka connector on its classpath."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from app.spark_session import spark_session

    session = spark_session(base_settings.model_copy(update={"spark_master": "local[2]"}), app_name="arbiter-tests")
    gateway = session.sparkContext._gateway
    proc = getattr(gateway, "proc", None)
    yield session
    session.stop()
    gateway.shutdown()
    if proc is not None:
        proc.stdin.close() if proc.stdin else None
        try:
            proc.wait(timeout=30)
        except Exception:  # noqa: BLE001
            proc.kill()
            proc.wait(timeout=10)
