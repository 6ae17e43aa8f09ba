"""The ``arbiter`` command line: one subcommand module per area, registered in SUBCOMMANDS; it may import every room."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from commands.errors import ArbiterError

# Each module defines ``register(subparsers)`` adding its subcommand(s); handlers take (args) -> int.
SUBCOMMANDS = [
    "app.cli.kafka",
    "app.cli.postgres",
    "app.cli.validator",
    "app.cli.run",
    "app.cli.api",
    "app.cli.load",
    "app.cli.project",
    "app.cli.audit",
    "app.cli.native",
    "app.cli.archive",
    "app.cli.parked",
    "app.cli.backup",
    "app.cli.erase",
    "app.cli.rules",
    "app.cli.verify",
    "app.cli.rescale",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arbiter", description="Arbiter: validate commands, emit events.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the scenario's table
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ArbiterError as e:
        print(f"arbiter: error [{e.code}]: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
