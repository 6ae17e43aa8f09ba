"""``arbiter rules check FILE`` (compile and report), ``test FILE`` (its own cases), ``deploy FILE``, ``explain ID``
(README "Rules")."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any

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
    deploy.add_argument("--deployed-by", "--operator", dest="operator",
                        help="who deploys (deployed_by in the catalog, GET /rules and the audit trail; default: "
                        "cli:<OS user>)")
    deploy.set_defaults(handler=_deploy)
    params = actions.add_parser("params", help="the named parameters guards read as params.<name>: deploy a "
                                "parameters file (`parameters: {...}`) as the next version, or show those in force")
    params_actions = params.add_subparsers(dest="params_action", required=True)
    params_deploy = params_actions.add_parser("deploy", help="the newest document with its parameters replaced by "
                                              "FILE's, checked and deployed as the next version (a control record "
                                              "on every partition); run what-if --params FILE first")
    params_deploy.add_argument("file", type=Path)
    params_deploy.add_argument("--deployed-by", "--operator", dest="operator",
                               help="who deploys (deployed_by; default: cli:<OS user>)")
    params_deploy.set_defaults(handler=_params_deploy)
    params_show = params_actions.add_parser("show", help="print the parameters of the newest version (JSON)")
    params_show.set_defaults(handler=_params_show)
    show = actions.add_parser("show", help="print the newest deployed version (with --document, its document; "
                              "with --all, every version: who deployed it, when)")
    show.add_argument("--document", action="store_true")
    show.add_argument("--all", action="store_true")
    show.set_defaults(handler=_show)
    what_if = actions.add_parser("what-if", help="fold the archive with the rules in force and with CANDIDATE "
                                 "switched in; report every decision that flips (README \"Verify\")")
    what_if.add_argument("file", type=Path)
    what_if.add_argument("--params", action="store_true", help="FILE is a parameters file: the candidate is the "
                         "newest deployed document with its parameters replaced (what rules params deploy would "
                         "deploy)")
    what_if.add_argument("--since", help="switch the candidate in at this RFC 3339 time (default: the beginning)")
    what_if.add_argument("--html", type=Path, help="also write the self-contained HTML report here")
    what_if.add_argument("--tail", action="store_true", help="also the records the topics hold past the archive (a "
                         "Kafka batch read, as verify replay --tail): the archive trails the topics by its trigger")
    what_if.set_defaults(handler=_what_if)
    explain = actions.add_parser("explain", help="re-decide one archived command with decide's tracing hook: the rules "
                                 "version, each rule that ran in order, its inputs and its result (docs/concepts/"
                                 "rules.md \"Explain\"); exit 1 if the archive holds no such command")
    explain.add_argument("command_id")
    explain.add_argument("--object", help="the object's id (default: every archived command holding the id)")
    explain.add_argument("--principal", help="only the command of this principal (command ids are per principal)")
    explain.add_argument("--json", action="store_true", help="print each explanation as one JSON line")
    explain.set_defaults(handler=_explain)


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
    from app.rules.deploy import deploy, deploy_parameters
    from commands.rules import RulesInvalid

    text = _read(args.file)
    if text is None:
        return 2
    operator = args.operator or f"cli:{getpass.getuser()}"
    try:
        done = (deploy_parameters if getattr(args, "params_action", None) else deploy)(
            get_settings(), text, principal=operator)
    except RulesInvalid as e:
        _print_problems(args.file, e)
        return 1
    d = done.deploy
    what = "deployed" if done.new else "already the newest version; its control records were written again"
    print(f"rules version {d.version} ({d.digest}) {what}, deployed_by {d.principal}")
    if done.new and d.version > 1:  # a newcomer re-deploying the example after ./dev run replaces the scenario's
        print(f"  it replaces version {d.version - 1} from each partition's control record on "
              "(arbiter rules what-if FILE shows first which past decisions a document flips)")
    for partition, offset in sorted(done.offsets.items()):
        print(f"  {get_settings().topic_commands}[{partition}]@{offset}")
    return 0


def _params_deploy(args: argparse.Namespace) -> int:
    return _deploy(args)


def _params_show(args: argparse.Namespace) -> int:
    from app.rules.catalog import current
    from commands.rules.document import parse_rules
    from commands.rules.params import parameters_of

    newest = current(get_settings())
    if newest is None:
        print("no rules deployed")
        return 0
    print(json.dumps({"version": newest.version, "digest": newest.digest, "deployed_by": newest.principal,
                      "parameters": parameters_of(parse_rules(newest.document))}, sort_keys=True, ensure_ascii=False))
    return 0


def _show(args: argparse.Namespace) -> int:
    from app.rules.catalog import deployed

    versions = deployed(get_settings())
    if not versions:
        print("no rules deployed")
        return 0
    for d in versions if args.all else versions[-1:]:
        print(json.dumps({"version": d.version, "digest": d.digest, "deployed_by": d.principal,
                          "deployed_at": d.deployed_at.isoformat()}, sort_keys=True))
    if args.document:
        print(versions[-1].document)
    return 0


def _what_if(args: argparse.Namespace) -> int:
    from app.cli.verify import what_if_command

    return what_if_command(args)


def _explain(args: argparse.Namespace) -> int:
    from app.verify.explain import explain_command

    found = explain_command(get_settings(), args.command_id, object_id=args.object, principal=args.principal)
    if not found:
        print(f"arbiter: no archived command {args.command_id!r}"
              f"{f' on {args.object!r}' if args.object else ''}: not archived yet (the archive trails the topic by "
              "its trigger), or no such command", file=sys.stderr)
        return 1
    for e in found:
        if args.json:
            print(json.dumps(e.as_dict(), sort_keys=True, ensure_ascii=False))
        else:
            for line in explanation_lines(e.as_dict()):
                print(line)
    return 0 if all(e.matches_fold for e in found) else 3


def explanation_lines(d: dict[str, Any]) -> list[str]:
    """Return an explanation (``Explained.as_dict``) as the lines ``arbiter rules explain`` prints."""
    where = f"{d['topic']}[{d['partition']}]@{d['offset']}"
    if "undecodable" in d:
        return [f"{where}: not a command ({d['undecodable']}); no rule ran"]
    o, c = d["outcome"], d["caller"]
    verdict = f"accepted ({o['event']}, version {o['version']})" if o["status"] == "accepted" else \
        f"rejected {o['reason']}" + (f" [{o['rule']}]" if o.get("rule") else "") + f": {o['message']}"
    groups = ", ".join(c["groups"]) or "none"
    lines = [f"command {d['command_id']} on {d['object_id']} ({d['kind']} by {c['principal']}, groups {groups}) at "
             f"{where}: {verdict}",
             f"rules version: {d['rules_version'] if d['rules_version'] is not None else 'none'}"]
    if not d["matches_fold"]:
        lines.append("WARNING: the validator's fold decides this record otherwise (a bug: please report it)")
    if "note" in d:
        return [*lines, f"no rule ran: {d['note']}"]
    lines += [f"type: {d['object_type']}", f"tracked before: {json.dumps(d['tracked']['before'], sort_keys=True)}",
              f"tracked after:  {json.dumps(d['tracked']['after'], sort_keys=True)}"]
    width = max((len(s["rule"]) for s in d["rules"]), default=0)
    for i, s in enumerate(d["rules"], 1):
        mode = "" if s["mode"] == "enforce" else f" ({s['mode']})"
        said = f" {s['reason']}: {s['message']}" if "reason" in s else ""
        inputs = f"  inputs {json.dumps(s['inputs'], sort_keys=True, ensure_ascii=False)}" if s["inputs"] else ""
        lines.append(f"  {i:2}. {s['rule']:<{width}}  {s['result']}{mode}{said}{inputs}")
    for w in o.get("warnings", ()):
        lines.append(f"  warning ({w['mode']}) {w['rule']}: {w['message']}")
    return lines
