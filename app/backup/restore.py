"""``arbiter backup verify`` and ``arbiter backup restore``: re-hash a backup or a restored copy; put a backup back.

A restore replaces each component wholesale (the read model as a new generation, so readers notice the swap; the
audit store; the validator's checkpoint, and it empties the validator's local shard cache, which would be ahead
of the restored checkpoint) and then re-hashes what it wrote against the manifest. Each component then resumes
from the offsets stored in its own copy.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from app.backup import manifest as mf
from app.backup.cut import (
    AUDIT,
    PG_DUMP,
    READ_MODEL,
    VALIDATOR,
    BackupRefused,
    local_checkpoint,
    pg_tool,
    writers_stopped,
)
from app.read_models import audit_root, postgres_conninfo, read_model_root
from app.settings import Settings, checkpoint_uri
from app.validator.lock import rocks_root
from projections.db.store import new_generation, swap_in


def verify_backup(directory: Path) -> mf.VerifyResult:
    """Re-hash every file of the backup in ``directory`` against its manifest."""
    manifest = mf.read(directory)
    return mf.verify_files(manifest, {READ_MODEL: directory / READ_MODEL, AUDIT: directory / AUDIT,
                                      VALIDATOR: directory / VALIDATOR, PG_DUMP: directory / PG_DUMP})


def verify_restored(s: Settings, directory: Path) -> mf.VerifyResult:
    """Re-hash the live stores of ``s`` against the backup's manifest (before any component starts and writes);
    the PostgreSQL read model is compared by its tables' row digests."""
    manifest = mf.read(directory)
    locate: dict[str, Path] = {AUDIT: audit_root(s), VALIDATOR: local_checkpoint(s)}
    if s.read_model == "rocksdb":  # the manifest's read_model/current/… resolves through the ``current`` symlink
        locate[READ_MODEL] = read_model_root(s)
    result = mf.verify_files(manifest, locate, extra=False)
    rm = manifest["components"].get(READ_MODEL, {})
    if rm.get("kind") == "postgresql":
        from app.backup.pg import current_digests

        now = current_digests(postgres_conninfo(s), s.postgres_schema)
        for table, digest in rm["tables"].items():
            result.checked += 1
            if now.get(table) != digest:
                result.problems.append(f"{s.postgres_schema}.{table}: rows differ from the backup's")
    return result


def _compatible(s: Settings, manifest: dict[str, Any]) -> None:
    want = manifest["settings"]
    have = {"read_model": s.read_model, "state_backend": s.state_backend, "partitions": s.partitions,
            "topics": {"commands": s.topic_commands, "events": s.topic_events, "rejections": s.topic_rejections}}
    diff = [f"{k}: backup {want.get(k)!r}, here {v!r}" for k, v in have.items() if want.get(k) != v]
    if diff:
        raise BackupRefused("the backup was cut under other settings, so its offsets would not fit: "
                            + "; ".join(diff))


def _replace(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    if src.is_dir():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, dst)


def restore(s: Settings, directory: Path) -> mf.VerifyResult:
    """Verify the backup, check no writer runs, replace every component by the backup's, re-hash the result."""
    manifest = mf.read(directory)
    checked = verify_backup(directory)
    if not checked.ok:
        raise mf.BackupInvalid(f"backup {directory} does not match its manifest, nothing restored: "
                               + "; ".join(checked.problems[:5]))
    _compatible(s, manifest)
    with writers_stopped(s):
        pass  # proven stopped; the stores are closed again before their directories are replaced
    if s.read_model == "postgresql":
        from app.backup.pg import restore_dump

        try:
            restore_dump(postgres_conninfo(s), s.postgres_schema, directory / PG_DUMP, pg_tool("pg_restore"))
        except subprocess.CalledProcessError as e:
            raise BackupRefused(f"pg_restore failed, the read model's schema is as it was, nothing restored: "
                                f"{(e.stderr or b'').decode(errors='replace').strip()[-2000:]}") from e
    else:
        root = read_model_root(s)
        shutil.rmtree(root, ignore_errors=True)
        if (directory / READ_MODEL / "current").is_dir():
            gen = new_generation(root)
            shutil.copytree(directory / READ_MODEL / "current", gen)
            swap_in(root, gen)
    _replace(directory / AUDIT, audit_root(s))
    _replace(directory / VALIDATOR, local_checkpoint(s))
    shutil.rmtree(rocks_root(s, checkpoint_uri(s)), ignore_errors=True)
    return verify_restored(s, directory)
