"""``arbiter parked list|show|redrive|discard``: the parking lot of command records the validator could not decode."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.settings import get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("parked", help="list, show, redrive or discard parked command records (docs/operations/parking-lot.md)")
    actions = p.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="one JSON line per parked record: origin, reason, sizes, status")
    ls.add_argument("--all", action="store_true", help="also those already redriven or discarded")
    ls.set_defaults(handler=_list)
    show = actions.add_parser("show", help="print one parked record's details; --key-out/--value-out write its bytes")
    show.add_argument("origin", help="where it was on the commands topic: topic[partition]@offset")
    show.add_argument("--value-out", type=Path, help="write the record's full value bytes to this file")
    show.add_argument("--key-out", type=Path, help="write the record's key bytes to this file")
    show.set_defaults(handler=_show)
    redrive = actions.add_parser("redrive", help="produce the record to the commands topic again, with a command id "
                                 "derived from its origin (so a second redrive is a DUPLICATE); logged to the audit; "
                                 "a record whose signature is not valid only with --value-file")
    redrive.add_argument("origin")
    redrive.add_argument("--value-file", type=Path, help="the operator's fixed record value (a command in the "
                         "Confluent Avro wire format) to send instead of the parked bytes: the only way to redrive "
                         "a record whose signature is invalid or absent (the redrive signs what it sends)")
    redrive.add_argument("--again", action="store_true", help="redrive a record already redriven or discarded")
    discard = actions.add_parser("discard", help="give a parked record up (its bytes stay on the topic); logged")
    discard.add_argument("origin")
    for a in (redrive, discard):
        a.add_argument("--operator", help="who does it (default: the OS user)")
        a.add_argument("--note", default="", help="why, for the audit trail")
    redrive.set_defaults(handler=_redrive)
    discard.set_defaults(handler=_discard)


def _list(args: argparse.Namespace) -> int:
    from app.parked import lot

    for e in lot.entries(get_settings()):
        if args.all or e.status == "parked":
            print(json.dumps(e.summary(), sort_keys=True))
    return 0


def _show(args: argparse.Namespace) -> int:
    from app.parked import lot
    from app.signing import signer_for

    settings = get_settings()
    e = lot.find(settings, args.origin)
    p = e.record
    info = e.summary()
    info["key"] = None if p.key is None else p.key[:200].decode("utf-8", "replace")
    info["value_head_hex"] = None if p.value is None else p.value[:64].hex()
    info["signature"] = lot.signature_state(p, signer_for(settings))  # valid | invalid | absent
    print(json.dumps(info, sort_keys=True, indent=2))
    if args.value_out is not None:
        args.value_out.write_bytes(p.value or b"")
    if args.key_out is not None:
        args.key_out.write_bytes(p.key or b"")
    return 0


def _redrive(args: argparse.Namespace) -> int:
    from app.parked import lot

    value = args.value_file.read_bytes() if args.value_file is not None else None
    record = lot.redrive(get_settings(), args.origin, value, operator=args.operator, note=args.note, again=args.again)
    print(json.dumps(record, sort_keys=True))
    return 0


def _discard(args: argparse.Namespace) -> int:
    from app.parked import lot

    print(json.dumps(lot.discard(get_settings(), args.origin, operator=args.operator, note=args.note), sort_keys=True))
    return 0

