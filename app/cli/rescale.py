"""``arbiter rescale --partitions N``: change the commands topic's partition count with the state intact."""

from __future__ import annotations

import argparse

from app.settings import get_settings

#: How long ``arbiter rescale`` waits by default for the validator to drain the old topic.
DEFAULT_WAIT_S = 300.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("rescale", help="move the commands topic to a new generation with N partitions, state intact "
                       "(docs/operations/rescale.md)")
    p.add_argument("--partitions", type=int, help="the new partition count (larger or smaller); required unless --status")
    p.add_argument("--wait", type=float, default=DEFAULT_WAIT_S, help="seconds to wait for the validator to drain the old "
                   "topic before refusing with RESCALE_NOT_DRAINED (default: %(default)g)")
    p.add_argument("--status", action="store_true", help="print the generations and any rescale under way, change nothing")
    p.set_defaults(handler=_run, parser=p)


def _run(args: argparse.Namespace) -> int:
    from app.rescale.generation import history
    from app.rescale.steps import read_plan, rescale

    settings = get_settings()
    if args.status:
        for g in history(settings):
            print(f"generation {g.number}: {g.topic} partitions={g.partitions} paused={g.paused} at={g.at} by={g.by}")
        plan = read_plan(settings)
        if plan is not None:
            print(f"rescale {plan.source.partitions} -> {plan.target.partitions}: step {plan.step}")
        return 0
    if args.partitions is None:
        args.parser.error("--partitions is required (or --status to print the generations)")
    import getpass
    import socket

    target = rescale(settings, args.partitions, wait_s=args.wait, by=f"{getpass.getuser()}@{socket.gethostname()}")
    print(f"commands generation {target.number}: {target.topic}, {target.partitions} partitions")
    return 0
