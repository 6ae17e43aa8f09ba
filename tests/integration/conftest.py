"""The running Arbiter that integration tests share: one validator query (on the session's Spark), one DB
projection and one API, on topics of their own, started on first use and stopped at the end of the session.

A test that only needs a running Arbiter takes ``arbiter`` (or, to run on each read-model backend, the session
fixture ``SHARED_ON[kind]`` names: on PostgreSQL the same validator's events are projected into a database of its
own, with an API reading it, started on first use) and names its objects, idempotency keys and principals
with ``arbiter.tag`` (or a uuid of its own), so tests never meet each other's objects. A test that kills, restarts
or reconfigures a component (the broker, the validator, the API's limits, the rules) starts its own stack, as
before: the shared one must stay as every other test expects it. A test that stops and starts a broker takes
``own_broker``: one broker apart from the session's, started once for all such tests (each on topics of its own)
and found running by each, instead of a broker started per module. ``played_run`` is one ``arbiter run`` subprocess
(scenario, status page, archive) for the tests that claim that command as a user runs it.
"""

from __future__ import annotations

import random
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from app.local.kafka_broker import LocalBroker, free_port
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


def port_to_restart_on() -> int:
    """A free loopback port below the kernel's ephemeral range, for a broker stopped and started again on it.

    A port from ``free_port`` is an ephemeral one: while the broker is down its clients keep connecting to it,
    and any outgoing connection on the machine (or a client's connection to itself, TCP's simultaneous open) may
    be given that very port as its local end, so the broker cannot bind it again ("Address already in use").
    The kernel never hands out a port below ``ip_local_port_range`` on its own.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)  # noqa: S311 - not for security
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


@pytest.fixture(scope="package")
def restartable_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A small broker apart from the session's, on ports that stay free while it is down, started once for every
    test that stops it (``own_broker``); each such test uses topics of its own."""
    broker = LocalBroker(Path(tmp_path_factory.mktemp("own-broker")), port=port_to_restart_on(),
                         controller_port=port_to_restart_on(), heap="384m", jit="c1")
    broker.start(Settings())
    try:
        yield broker
    finally:
        broker.stop()
        assert broker.running_pid() is None


@pytest.fixture
def own_broker(restartable_broker: LocalBroker) -> LocalBroker:
    """The broker a test may stop and start again, running and answering when the test begins (a test that failed
    while it was down left it stopped: it is started again here)."""
    restartable_broker.start(Settings())
    return restartable_broker
