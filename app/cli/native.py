"""``arbiter native build|status``: the optional compiled paths, mypyc's domain and codec (``app.native.loader``) and
the Rust decision core of the shard servers (``app.native.core``)."""

from __future__ import annotations

import argparse
import os

from app.native import core
from app.native import loader as native
from app.native.build import build


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("native", help="compile commands/ and schemas/ with mypyc and core/ with maturin (optional; "
                       "pure Python otherwise)")
    actions = p.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="compile the current sources unless built (seconds when up to date)")
    b.add_argument("--force", action="store_true", help="compile again even if built")
    b.add_argument("--quiet", action="store_true", help="print nothing when already built")
    b.set_defaults(handler=_build)
    actions.add_parser("status", help="say whether this process runs the compiled modules").set_defaults(
        handler=_status)


def _build(args: argparse.Namespace) -> int:
    """Compile if needed; exit 1 (after one warning line each) when either cannot, so scripts may carry on."""
    path = native.build_dir()
    if os.path.isdir(path) and not args.force:
        build()  # only prunes other digests' builds
        if not args.quiet:
            print(f"native: up to date ({os.path.relpath(path, native.ROOT)})")
        domain = True
    else:
        domain = build(force=args.force)
    from app.native.core_build import build as build_core  # cargo and maturin are only looked for here

    return 0 if build_core(force=args.force, quiet=args.quiet) and domain else 1


def _status(_: argparse.Namespace) -> int:
    print(f"domain: {native.status()}")
    print(f"shard decisions: {core.status(os.environ.get('ARBITER_CORE', 'auto').strip().lower())}")
    return 0
