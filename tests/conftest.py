"""Session fixtures: one real KRaft broker, one local SparkSession, unique topics per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hsettings

from app.kafka_broker import LocalBroker, free_port
from app.settings import Settings
from app.topics import ensure_topics

hsettings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
hsettings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("arbiter")


@pytest.fixture(scope="session")
def kafka_bootstrap(session_dir: Path) -> Iterator[str]:
    """A real broker for the whole session: ``ARBITER_KAFKA_BOOTSTRAP`` if set, else one we start and stop."""
    external = os.environ.get("ARBITER_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    broker = LocalBroker(session_dir / "kafka", port=free_port(), controller_port=free_port(), heap="512m")
    broker.start(Settings())
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
        assert broker.running_pid() is None, "the test broker outlived the session"


@pytest.fixture(scope="session")
def base_settings(kafka_bootstrap: str, session_dir: Path) -> Settings:
    return Settings(kafka_bootstrap=kafka_bootstrap, var_dir=session_dir / "var", partitions=4)


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
