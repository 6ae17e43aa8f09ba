"""``arbiter backup create|verify|restore``: a backup of the read model, the audit store and the validator's
checkpoint, with every writer stopped, proved by a manifest of offsets and SHA-256 hashes."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.settings import get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("backup", help="back up, verify and restore the read model, audit store and validator "
                       "checkpoint (every writer stopped)")
    actions = p.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="cut every component into a new directory and write its manifest")
    create.add_argument("directory", type=Path)
    create.set_defaults(handler=_create)
    verify = actions.add_parser("verify", help="re-hash a backup (or, with --restored, the live stores before "
                                "they start) against its manifest")
    verify.add_argument("directory", type=Path)
    verify.add_argument("--restored", action="store_true",
                        help="check the stores this configuration points at, not the backup's own files")
    verify.set_defaults(handler=_verify)
    restore = actions.add_parser("restore", help="verify a backup, then replace every component by it")
    restore.add_argument("directory", type=Path)
    restore.set_defaults(handler=_restore)


def _create(args: argparse.Namespace) -> int:
    from app.backup.cut import create

    manifest = create(get_settings(), args.directory)
    for name, part in sorted(manifest["components"].items()):
        offsets = ", ".join(f"{tp}={o}" for tp, o in sorted(part.get("offsets", {}).items())) or "none yet"
        print(f"{name}: offsets {offsets}")
    print(f"backup written to {args.directory}: {len(manifest['files'])} files in {manifest['seconds']} s")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from app.backup.restore import verify_backup, verify_restored

    result = verify_restored(get_settings(), args.directory) if args.restored else verify_backup(args.directory)
    for problem in result.problems:
        print(f"BAD {problem}")
    what = "restored copy" if args.restored else "backup"
    print(f"{what} matches its manifest ({result.checked} checked)" if result.ok
          else f"{what} does NOT match its manifest: {len(result.problems)} problem(s)")
    return 0 if result.ok else 1


def _restore(args: argparse.Namespace) -> int:
    from app.backup.restore import restore

    result = restore(get_settings(), args.directory)
    for problem in result.problems:
        print(f"BAD {problem}")
    print(f"restored from {args.directory}; {result.checked} checked against the manifest: "
          + ("all match" if result.ok else f"{len(result.problems)} differ"))
    return 0 if result.ok else 1
