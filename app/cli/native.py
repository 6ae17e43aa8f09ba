"""``arbiter native build|status``: the optional mypyc build of the domain and codec (see app.native.loader)."""

from __future__ import annotations

import argparse
import os

from app.native import loader as native
from app.native.build import build


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("native", help="compile commands/ and schemas/ with mypyc (optional; pure Python otherwise)")
    actions = p.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="compile the current sources unless built (seconds when up to date)")
    b.add_argument("--force", action="store_true", help="compile again even if built")
    b.add_argument("--quiet", action="store_true", help="print nothing when already built")
    b.set_defaults(handler=_build)
    actions.add_parser("status", help="say whether this process runs the compiled modules").set_defaults(
        handler=_status)


def _build(args: argparse.Namespace) -> int:
    """Compile if needed; exit 1 (after one warning line) when it cannot, so scripts may carry on."""
    path = native.build_dir()
    if os.path.isdir(path) and not args.force:
        build()  # only prunes other digests' builds
        if not args.quiet:
            print(f"native: up to date ({os.path.relpath(path, native.ROOT)})")
        return 0
    return 0 if build(force=args.force) else 1


def _status(_: argparse.Namespace) -> int:
    print(native.status())
    return 0
