"""The running Arbiter that integration tests share: one validator query (on the session's Spark), one DB
projection and one API, on topics of their own, started on first use and stopped at the end of the session.

A test that only needs a running Arbiter takes ``arbiter`` (or, to run on each read-model backend, the session
fixture ``SHARED_ON[kind]`` names: on PostgreSQL the same validator's events are projected into a database of its
own, with an API reading it, started on first use) and names its objects, idempotency keys and principals
with ``arbiter.tag`` (or a uuid of its own), so tests never meet each other's objects. A test that kills, restarts
or reconfigures a component (the broker, the validator, the API's limits, the rules) starts its own stack, as
before: the shared one must stay as every other test expects it. ``played_run`` is one ``arbiter run`` subprocess
(scenario, status page, archive) for the tests that claim that command as a user runs it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from app.settings import Settings
from tests.integration.test_api_support import (
    RunningArbiter,
    api_client,
    db_projection_running,
    live_pipeline,
    module_settings_for,
)


@pytest.fixture(scope="package")  # torn down when the integration tests are done: no thread of it runs under the unit tier
def shared_arbiter(spark: Any, base_settings: Settings,  # noqa: ANN401 - a SparkSession
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Any]]:
    """Start the shared stack once: validator query, DB projection, API (``live_pipeline`` and ``api_client``)."""
    s = module_settings_for(base_settings, tmp_path_factory, "shared-arbiter", wait_max_s=120.0)
    assert s.read_model == "rocksdb", s.read_model
    with live_pipeline(spark, s), api_client(s) as client:
        yield s, client


@pytest.fixture(scope="package")
def shared_arbiter_on_postgresql(shared_arbiter: tuple[Settings, Any],
                                 postgres: Any) -> Iterator[tuple[Settings, Any]]:  # noqa: ANN401 - LocalPostgres
    """The shared validator's events projected by a second DB projection into a fresh PostgreSQL database, and an
    API reading it: the shared running Arbiter on the other read-model backend."""
    shared, _ = shared_arbiter
    name = f"t_{uuid.uuid4().hex[:12]}"
    s = shared.model_copy(update={"read_model": "postgresql", "postgres_dsn": SecretStr(postgres.create_database(name))})
    try:
        with db_projection_running(s), api_client(s) as client:
            yield s, client
    finally:
        postgres.drop_database(name)


@pytest.fixture
def arbiter(shared_arbiter: tuple[Settings, Any]) -> RunningArbiter:
    """The shared running Arbiter, with a tag for this test's object ids, keys and principals."""
    s, client = shared_arbiter
    return RunningArbiter(s, client, uuid.uuid4().hex[:8])


@pytest.fixture(scope="package")
def played_run(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One ``arbiter run`` (a subprocess, its scenario played, serving) on topics and a var directory of its own,
    for the tests of ``arbiter run`` as a user runs it (``tests.integration.played_run``): the first to claim it
    while it serves stops it; another test that needs one serving starts its own."""
    from tests.integration.played_run import start_run, stop_run

    run = start_run(module_settings_for(base_settings, tmp_path_factory, "played-run"))
    try:
        yield run
    finally:
        stop_run(run)


#: The session fixture serving each read-model backend (``tests.conftest.READ_MODELS``).
SHARED_ON = {"rocksdb": "shared_arbiter", "postgresql": "shared_arbiter_on_postgresql"}
