"""``arbiter erase <object_id>``: purge a deleted object's documents from the read model and the audit store."""

from __future__ import annotations

import argparse

from app.read_models import audit_root, postgres_conninfo, read_model_root
from app.settings import get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("erase", help="purge a deleted object's documents from the read model and the audit store "
                       "(DB and audit projections stopped; the topics are the operator's: README, Erasure)")
    p.add_argument("object_id")
    p.add_argument("--reason", default="erasure request", help="recorded in each audit chain's erasure entry")
    p.set_defaults(handler=_erase)


def _erase(args: argparse.Namespace) -> int:
    from projections.audit.erase import erase_object

    s = get_settings()
    if s.read_model == "postgresql":
        from projections.postgres.erase import erase_row

        row = erase_row(postgres_conninfo(s), s.postgres_schema, args.object_id)
        where = "not in the read model" if row is None else f"tombstone kept at version {row[0]}, document erased"
    else:
        from projections.db.erase import erase_view

        view = erase_view(read_model_root(s), args.object_id)
        where = "not in the read model" if view is None else f"tombstone kept at version {view.version}, document erased"
    print(f"read model: {where}")
    root = audit_root(s)
    if (root / "CURRENT").exists():
        done = erase_object(root, args.object_id, args.reason)
        for (topic, partition), seqs in sorted(done.erased.items()):
            print(f"audit {topic}[{partition}]: records {', '.join(f'#{n}' for n in seqs)} erased; erasure entry appended")
        print(f"audit: {done.count} record value(s) erased, {done.already} already erased or empty")
    else:
        print(f"audit: no audit store at {root}")
    return 0
