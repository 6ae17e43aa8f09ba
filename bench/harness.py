"""A benchmark's throwaway broker (and PostgreSQL server): started on free ports under a work directory, stopped by
its PID at the end."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from app.local.kafka_broker import LocalBroker, free_port
from app.local.postgres_server import LocalPostgres
from app.settings import Settings


@contextmanager
def throwaway_broker(work: Path, heap: str = "1g") -> Iterator[LocalBroker]:
    """Start a KRaft broker in ``work/kafka`` on free loopback ports; stop it when the block ends, however it ends."""
    broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap=heap)
    broker.start(Settings())
    try:
        yield broker
    finally:
        broker.stop()


@contextmanager
def bootstrap_for(given: str | None, work: Path, heap: str = "1g") -> Iterator[str]:
    """Yield ``given`` (an existing broker's bootstrap) if set, else a throwaway broker's, stopped at the end."""
    if given is not None:
        yield given
        return
    with throwaway_broker(work, heap) as broker:
        yield broker.bootstrap


@contextmanager
def postgres_databases(work: Path) -> Iterator[Callable[[str], str]]:
    """Yield ``database(name) -> DSN``: ``ARBITER_POSTGRES_DSN`` if set, else a new database ``name`` on a throwaway
    PostgreSQL server in ``work/postgres``, started on first use and stopped by its PID when the block ends."""
    dsn = os.environ.get("ARBITER_POSTGRES_DSN")
    server: list[LocalPostgres] = []

    def database(name: str) -> str:
        if dsn:
            return dsn
        if not server:
            server.append(LocalPostgres(work / "postgres", port=free_port()))
            server[0].start()
        return server[0].create_database(name)

    try:
        yield database
    finally:
        for s in server:
            s.stop()
