"""``arbiter erase <object_id>``: purge a deleted object's documents from the read model, the audit store and a
local archive."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from app.read_models import audit_root, postgres_conninfo, read_model_root
from app.settings import Settings, get_settings
from app.validator.lock import FileLock

if TYPE_CHECKING:
    from commands import Event


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
    try:
        root = audit_root(s)
        deleted = _audited_deletion(root, args.object_id)  # liveness from the audit trail, before anything changes
        print(f"audit: object deleted at version {deleted.version} by {deleted.principal}")
        if s.read_model == "postgresql":
            from projections.postgres.erase import erase_row

            version = erase_row(postgres_conninfo(s), s.postgres_schema, args.object_id)[0]
        else:
            from projections.db.erase import erase_view

            version = erase_view(read_model_root(s), args.object_id).version
        print(f"read model: tombstone kept at version {version}, document erased")
        done = erase_object(root, args.object_id, args.reason)
    except BaseException:
        for held in archive or ():
            held.release()
        raise
    for (topic, partition), seqs in sorted(done.erased.items()):
        print(f"audit {topic}[{partition}]: records {', '.join(f'#{n}' for n in seqs)} erased; erasure entry appended")
    print(f"audit: {done.count} record value(s) erased, {done.already} already erased or empty")
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


def _audited_deletion(root: Path, object_id: str) -> Event:
    """Return the object's ``DELETED`` event from the audit trail's by-object index, or raise: the audit trail, not
    the read model (which may be stopped, empty, another deployment's or behind), says whether an object is live."""
    from projections.audit.erase import DeletionNotAudited, open_exclusive, require_deletion

    if not (root / "CURRENT").exists():
        raise DeletionNotAudited(f"no audit store at {root}: an erasure takes the object's deletion from the audit "
                                 "trail (ARBITER_VAR_DIR?); nothing was erased")
    db = open_exclusive(root)
    try:
        return require_deletion(db, object_id)
    finally:
        db.close()


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
