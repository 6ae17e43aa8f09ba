"""``arbiter postgres start|stop|status``: the local PostgreSQL server for ``ARBITER_READ_MODEL=postgresql``."""

from __future__ import annotations

import argparse

from app.local.postgres_server import DATABASE, USER, LocalPostgres
from app.settings import get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("postgres", help="run the local PostgreSQL server (read model backend)")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("start", help="initialise on first use, start on 127.0.0.1 (ARBITER_POSTGRES_PORT)").set_defaults(
        handler=_start)
    actions.add_parser("stop", help="stop the server by its PID").set_defaults(handler=_stop)
    actions.add_parser("status", help="server PID, port and data directory").set_defaults(handler=_status)


def _start(_: argparse.Namespace) -> int:
    server = LocalPostgres.from_settings(get_settings())
    pid = server.start()
    print(f"postgres running on 127.0.0.1:{server.port} (pid {pid}, data {server.data}); database {DATABASE}, "
          f"user {USER}, password in {server.password_file}")
    return 0


def _stop(_: argparse.Namespace) -> int:
    server = LocalPostgres.from_settings(get_settings())
    print("postgres stopped" if server.stop() else "postgres was not running")
    return 0


def _status(_: argparse.Namespace) -> int:
    server = LocalPostgres.from_settings(get_settings())
    pid = server.running_pid()
    print(f"local postgres: {'pid ' + str(pid) if pid else 'not running'} (127.0.0.1:{server.port}, data {server.data})")
    return 0 if pid else 1
