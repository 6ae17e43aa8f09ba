"""``arbiter audit verify`` (recompute the hash chains) and ``arbiter audit show <object_id>`` (an object's history)."""

from __future__ import annotations

import argparse

from app.read_models import audit_root
from app.settings import get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("audit", help="check or read the audit trail")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("verify", help="recompute every partition's hash chain, check its offsets have no hole; "
                       "name the first broken record").set_defaults(handler=_verify)
    show = actions.add_parser("show", help="print an object's accepted and rejected commands, oldest first "
                              "(arbiter:rules: every rules deploy, who deployed which version, where it took over)")
    show.add_argument("object_id")
    show.set_defaults(handler=_show)


def _verify(_: argparse.Namespace) -> int:
    from projections.audit import verify

    root = audit_root(get_settings())
    if not (root / "CURRENT").exists():
        print(f"arbiter: no audit store at {root} (run `arbiter project audit` first)")
        return 2
    report = verify(root)
    for (topic, partition), n in sorted(report.entries.items()):
        head = report.heads.get((topic, partition), "-")
        start = report.starts.get((topic, partition))
        since = f" from offset {start}" if start is not None else ""
        print(f"{topic}[{partition}]: {n} records{since}, head {head[:16]}")
    for restart in report.restarts:
        print(f"RESTART {restart}")
    for problem in report.problems:
        print(f"BROKEN {problem}")
    print("audit trail intact" if report.ok else f"audit trail BROKEN: {len(report.problems)} chain(s) fail")
    return 0 if report.ok else 1


def _show(args: argparse.Namespace) -> int:
    from projections.audit import history

    root = audit_root(get_settings())
    if not (root / "CURRENT").exists():
        print(f"arbiter: no audit store at {root} (run `arbiter project audit` first)")
        return 2
    entries = history(root, args.object_id)
    for e in entries:
        print(e)
    if not entries:
        print(f"no audited decisions for {args.object_id!r}")
        return 1
    return 0
