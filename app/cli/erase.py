"""``arbiter erase <object_id>``: purge a deleted object's documents from the read model, the audit store and a
local archive."""

from __future__ import annotations

import argparse

from app.read_models import audit_root, postgres_conninfo, read_model_root
from app.settings import Settings, get_settings
from app.validator.lock import FileLock


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("erase", help="purge a deleted object's documents from the read model, the audit store and a "
                       "local archive (DB and audit projections and the archive query stopped; the topics are the "
                       "operator's: docs/operations/erasure.md)")
    p.add_argument("object_id")
    p.add_argument("--reason", default="erasure request", help="recorded in each audit chain's erasure entry")
    p.set_defaults(handler=_erase)


def _erase(args: argparse.Namespace) -> int:
    from projections.audit.erase import erase_object

    s = get_settings()
    archive = _archive_lock(s)  # before anything changes: a running archive query refuses the whole erasure
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
    if archive is None:
        print(f"archive: none at {s.archive_location}" if _is_local(s.archive_location) else
              f"archive: {s.archive_location} is not local: not purged (docs/operations/erasure.md)")
    else:
        from app.archive.erase import erase_archive

        done_archive = erase_archive(archive[0].path.parent, args.object_id, archive)
        for f in done_archive.files:
            print(f"archive: {f} rewritten")
        print(f"archive: {done_archive.rows} row value(s) erased in {len(done_archive.files)} file(s), "
              f"{done_archive.log_entries} sink-log entries updated")
    return 0


def _is_local(uri: str) -> bool:
    from urllib.parse import urlparse

    return urlparse(uri).scheme in ("", "file")


def _archive_lock(s: Settings) -> list[FileLock] | None:
    """Take a local archive's locks, or raise ``ArchiveBusy``; None when there is no local archive."""
    from app.archive.erase import lock_all
    from projections.archived import local_root

    if not _is_local(s.archive_location):
        return None
    root = local_root(s.archive_location)
    return lock_all(root, "erasing") if root.is_dir() else None
