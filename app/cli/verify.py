"""``arbiter verify replay``: re-decide the archived history and compare it with what is stored (README "Verify")."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from app.settings import get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("verify", help="prove the topics hold what the code decides (README \"Verify\")")
    actions = p.add_subparsers(dest="action", required=True)
    replay = actions.add_parser("replay", help="re-decide every archived command with the rules then in force and "
                                "compare each output byte for byte; exit 1 on any divergence (Spark, local[*] "
                                "unless ARBITER_SPARK_MASTER is set)")
    replay.add_argument("--since", type=since_ms, help="compare only decisions of commands that reached the topic at "
                        "or after this RFC 3339 time; each such object still folds from its first command")
    replay.add_argument("--objects", help="comma-separated object ids to verify (default: every object)")
    replay.add_argument("--first", type=int, default=20, help="how many divergences to list (default 20)")
    replay.add_argument("--tail", action="store_true", help="also the records the topics hold past the archive "
                        "(a Kafka batch read; run it once the validator has caught up)")
    replay.add_argument("--json", action="store_true", help="print the report as JSON")
    replay.set_defaults(handler=_replay)


def since_ms(text: str) -> int:
    """Parse an RFC 3339 time (a zone is required) into Unix milliseconds."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 time: {text!r}") from e
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no zone (write Z or +hh:mm)")
    return int(at.astimezone(UTC).timestamp() * 1000)


def _replay(args: argparse.Namespace) -> int:
    from app.verify.replay import replay, session

    settings = get_settings()
    spark = session(settings)
    try:
        objects = [o for o in (args.objects or "").split(",") if o] or None
        report = replay(spark, settings, since_ms=args.since, objects=objects, first=args.first,
                        tail=args.tail)
    finally:
        spark.stop()
    if args.json:
        print(json.dumps(report.as_dict(), sort_keys=True))
    else:
        print(f"{report.objects} objects, {report.commands} commands re-decided under rules versions "
              f"{list(report.rules_versions) or 'none'}: {report.expected} outputs expected, {report.stored} stored, "
              f"{report.divergences} divergences")
        if report.erased:
            print(f"{report.erased} erased objects not re-decided (arbiter erase nulled their records): "
                  f"{report.erased_commands} commands, {report.erased_stored} outputs; first: "
                  f"{', '.join(report.erased_objects)}")
        for f in report.first:
            source = f" (from {f.source_topic or settings.topic_commands}[{f.source_partition}]@{f.source_offset})" \
                if f.source_partition is not None else ""
            where = f"{f.topic}[{f.partition}]@{f.offset}" if f.offset >= 0 else f"{f.topic}[{f.partition}]"
            print(f"  {f.what}: {where}{source}: {f.detail}", file=sys.stdout)
    return 0 if report.clean else 1


def what_if_command(args: argparse.Namespace) -> int:
    """``arbiter rules what-if FILE``: print the JSON report (and write the HTML one); exit 1 if it does not compile."""
    from app.verify.html import render
    from app.verify.replay import session
    from app.verify.whatif import what_if
    from commands.rules import RulesInvalid, canonical_rules, compile_rules

    try:
        if getattr(args, "params", False):  # the newest document with the file's parameters
            from app.rules.deploy import parameters_candidate

            candidate = parameters_candidate(get_settings(), args.file.read_bytes())[1]
        else:
            candidate = canonical_rules(args.file.read_bytes())
        compile_rules(candidate, version=1)  # refuse what no shard would switch to
    except OSError as e:
        print(f"arbiter: cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    except RulesInvalid as e:
        for problem in e.problems or (str(e),):
            print(f"{args.file}: {problem}", file=sys.stderr)
        return 1
    try:
        switch = since_ms(args.since) if args.since else 0
    except argparse.ArgumentTypeError as e:
        print(f"arbiter: --since: {e}", file=sys.stderr)
        return 2
    settings = get_settings()
    spark = session(settings)
    try:
        report = what_if(spark, settings, candidate, switch_ms=switch, tail=getattr(args, "tail", False))
    finally:
        spark.stop()
    if args.html:
        args.html.parent.mkdir(parents=True, exist_ok=True)  # var/flips.html in a clone that has no var/ yet
        args.html.write_text(render(report), encoding="utf-8")
    print(json.dumps(report.as_dict(), sort_keys=True))
    return 0
