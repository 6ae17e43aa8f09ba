"""``arbiter rules check FILE`` (compile and report), ``test FILE`` (its own cases), ``deploy FILE`` (README "Rules")."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path

from app.settings import get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rules", help="check, deploy or show the team's rules (README \"Rules\")")
    actions = p.add_subparsers(dest="action", required=True)
    check = actions.add_parser("check", help="compile a rules document (YAML or JSON) and report; exit 1 on problems")
    check.add_argument("file", type=Path)
    check.set_defaults(handler=_check)
    test = actions.add_parser("test", help="run a rules document's own test cases (its `tests`) on the real "
                              "decide; print each failure and what no case exercised; exit 1 on a failure")
    test.add_argument("file", type=Path)
    test.set_defaults(handler=_test)
    deploy = actions.add_parser("deploy", help="check, then deploy as the next version: a signed control record to "
                                "every partition of the commands topic (no restart)")
    deploy.add_argument("file", type=Path)
    deploy.add_argument("--operator", help="who deploys, for the audit trail (default: cli:<OS user>)")
    deploy.set_defaults(handler=_deploy)
    show = actions.add_parser("show", help="print the newest deployed version (with --document, its document; "
                              "with --all, every version: who deployed it, when)")
    show.add_argument("--document", action="store_true")
    show.add_argument("--all", action="store_true")
    show.set_defaults(handler=_show)
    what_if = actions.add_parser("what-if", help="fold the archive with the rules in force and with CANDIDATE "
                                 "switched in; report every decision that flips (README \"Verify\")")
    what_if.add_argument("file", type=Path)
    what_if.add_argument("--since", help="switch the candidate in at this RFC 3339 time (default: the beginning)")
    what_if.add_argument("--html", type=Path, help="also write the self-contained HTML report here")
    what_if.set_defaults(handler=_what_if)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError as e:
        print(f"arbiter: cannot read {path}: {e}", file=sys.stderr)
        return None


def _print_problems(path: Path, e: Exception) -> None:
    """Print each problem of a refused document (``RulesInvalid.problems``), one line each, to stderr."""
    for problem in getattr(e, "problems", None) or (str(e),):
        print(f"{path}: {problem}", file=sys.stderr)


def _check(args: argparse.Namespace) -> int:
    from app.rules.deploy import check
    from commands.rules import RulesInvalid

    text = _read(args.file)
    if text is None:
        return 2
    try:
        rules = check(text)
    except RulesInvalid as e:
        _print_problems(args.file, e)
        print(f"{args.file}: {len(e.problems or (1,))} problem(s); not deployable", file=sys.stderr)
        return 1
    print(f"{args.file}: OK, digest {rules.digest}")
    watching = rules.watching()
    if watching:  # they never refuse: a reader of the check should not take them for enforced
        print("rules in warn or audit mode (never refuse): " + ", ".join(f"{r} ({m})" for r, m in watching))
    return 0


def _test(args: argparse.Namespace) -> int:
    from commands.rules import RulesInvalid
    from commands.rules.cases import run_cases

    text = _read(args.file)
    if text is None:
        return 2
    try:
        report = run_cases(text)
    except RulesInvalid as e:
        _print_problems(args.file, e)
        return 1
    for line in report.lines():
        print(line)
    return 1 if report.failures else 0


def _deploy(args: argparse.Namespace) -> int:
    from app.rules.deploy import deploy
    from commands.rules import RulesInvalid

    text = _read(args.file)
    if text is None:
        return 2
    operator = args.operator or f"cli:{getpass.getuser()}"
    try:
        done = deploy(get_settings(), text, principal=operator)
    except RulesInvalid as e:
        _print_problems(args.file, e)
        return 1
    d = done.deploy
    what = "deployed" if done.new else "already the newest version; its control records were written again"
    print(f"rules version {d.version} ({d.digest}) {what}, by {d.principal}")
    for partition, offset in sorted(done.offsets.items()):
        print(f"  {get_settings().topic_commands}[{partition}]@{offset}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from app.rules.catalog import deployed

    versions = deployed(get_settings())
    if not versions:
        print("no rules deployed")
        return 0
    for d in versions if args.all else versions[-1:]:
        print(json.dumps({"version": d.version, "digest": d.digest, "principal": d.principal,
                          "deployed_at": d.deployed_at.isoformat()}, sort_keys=True))
    if args.document:
        print(versions[-1].document)
    return 0


def _what_if(args: argparse.Namespace) -> int:
    from app.cli.verify import what_if_command

    return what_if_command(args)
