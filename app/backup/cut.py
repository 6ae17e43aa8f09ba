"""``arbiter backup create``: cut every component with its writer stopped, hash every file, write the manifest.

Consistent means: each component's copy holds its data and its own consumed offsets from one instant (RocksDB
checkpoints of the read model and the audit store, taken while this process holds their primaries; the validator's
checkpoint directory copied while this process holds its job lock; PostgreSQL dumped from one exported snapshot),
and since no writer can start while those are held, the instants are one. The cut refuses, naming each, when a
writer holds its store (``BACKUP_REFUSED``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rocksdict import Checkpoint, Rdict

from app.backup import manifest as mf
from app.errors import ArbiterError
from app.read_models import audit_root, postgres_conninfo, read_model_root
from app.settings import Settings, checkpoint_uri
from app.validator.lock import FileLock, job_lock_path, rocks_root
from projections.audit import store as audit_store
from projections.audit.erase import AuditStoreBusy
from projections.audit.erase import open_exclusive as open_audit
from projections.db.erase import ReadModelBusy
from projections.db.erase import open_primary as open_read_model
from projections.db.store import current_generation, iter_offsets

READ_MODEL, AUDIT, VALIDATOR, PG_DUMP = "read_model", "audit", "validator", "read_model.pgdump"


class BackupRefused(ArbiterError):
    """A component's writer is running (or the layout cannot be copied consistently); nothing was written."""

    code = "BACKUP_REFUSED"


def tp_name(topic: str, partition: int) -> str:
    return f"{topic}[{partition}]"


def local_checkpoint(s: Settings) -> Path:
    """The validator's checkpoint as a local directory; a remote URI is refused (back up the object store)."""
    ck = checkpoint_uri(s)
    if "://" in ck and not ck.startswith("file://"):
        raise BackupRefused(f"the validator's checkpoint {ck} is not a local directory: back it up with the object "
                            "store's own tools while the validator is stopped (docs/operations/backup.md)")
    return Path(os.path.abspath(ck.removeprefix("file://")))


@contextmanager
def writers_stopped(s: Settings) -> Iterator[dict[str, Rdict | None]]:
    """Hold the read model's and the audit store's primaries and the validator's job lock, or raise
    ``BackupRefused`` naming every component that is running. Yields the open stores (None where absent)."""
    busy: list[str] = []
    with ExitStack() as stack:
        opened: dict[str, Rdict | None] = {READ_MODEL: None, AUDIT: None}
        if s.read_model == "rocksdb":
            gen = current_generation(read_model_root(s))
            if gen is not None:
                try:
                    db = open_read_model(gen)
                    stack.callback(db.close)
                    opened[READ_MODEL] = db
                except ReadModelBusy as e:
                    busy.append(f"the DB projection ({e})")
        elif s.read_model == "postgresql":
            busy += [f"the DB projection (PostgreSQL connection {w})" for w in _pg_writers(s)]
        if (audit_root(s) / "CURRENT").exists():
            try:
                db = open_audit(audit_root(s))
                stack.callback(db.close)
                opened[AUDIT] = db
            except AuditStoreBusy as e:
                busy.append(f"the audit projection ({e})")
        ck = local_checkpoint(s)
        if ck.is_dir():
            lock = FileLock(job_lock_path(str(ck), rocks_root(s, checkpoint_uri(s))))
            if lock.try_acquire():
                stack.callback(lock.release)
            else:
                busy.append(f"the validator (pid {lock.holder()} holds {lock.path})")
        if busy:
            raise BackupRefused("backup and restore need every writer stopped, and these run: " + "; ".join(busy)
                                + ". Stop them (arbiter run: Ctrl-C), then try again; nothing was written")
        yield opened


def _pg_writers(s: Settings) -> list[str]:
    import psycopg

    from projections.postgres.schema import running_writers

    try:
        with psycopg.connect(postgres_conninfo(s), autocommit=True) as conn:
            return running_writers(conn, s.postgres_schema)
    except psycopg.OperationalError as e:
        raise BackupRefused(f"the PostgreSQL read model cannot be reached: {e}") from e


def _versions(s: Settings) -> dict[str, str]:
    out = {name: version(name) for name in ("arbiter", "rocksdict", "pyspark")}
    if s.read_model == "postgresql":
        out["pg_dump"] = subprocess.run([pg_tool("pg_dump"), "--version"], capture_output=True, text=True,  # noqa: S603
                                        check=True).stdout.strip()
    return out


def pg_tool(name: str) -> str:
    """``pg_dump``/``pg_restore`` of the newest local PostgreSQL (at least the server's major), else from PATH."""
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True):
        if (d / name).exists():
            return str(d / name)
    found = shutil.which(name)
    if found is None:
        raise BackupRefused(f"{name} is not installed (Debian: the postgresql-client package)")
    return found


def _checkpoint_rocks(db: Rdict, dst: Path, prefix: str) -> list[dict[str, Any]]:
    dst.parent.mkdir(parents=True, exist_ok=True)
    Checkpoint(db).create_checkpoint(str(dst))
    return mf.tree_entries(dst, prefix)


def _copy_tree(src: Path, dst: Path, prefix: str, skip: set[str]) -> list[dict[str, Any]]:
    out = []
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src).as_posix()
        if p.is_file() and not p.is_symlink() and rel not in skip:
            out.append(mf.file_entry(f"{prefix}/{rel}", p, mf.copy_hashed(p, dst / rel)))
    return out


def spark_offsets(checkpoint: Path) -> tuple[int | None, dict[str, int]]:
    """The newest batch in Spark's commit log and its end offsets per partition (``topic[p]``), from its offset log."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
    if not commits:
        return None, {}
    batch = max(commits)
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    offsets: dict[str, int] = {}
    for line in lines[2:]:
        for topic, parts in json.loads(line).items():
            offsets.update({tp_name(topic, int(p)): int(o) for p, o in parts.items()})
    return batch, offsets


def _pg_cut(s: Settings, dst: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Dump the read model's schema from one exported snapshot, and read its offsets and row digests in it."""
    import psycopg

    from app.backup.pg import table_digests

    conninfo, schema = postgres_conninfo(s), s.postgres_schema
    with psycopg.connect(conninfo) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        snapshot = str(row[0])
        offsets = {tp_name(t, p): int(o) for t, p, o in conn.execute(
            f'SELECT topic, partition, next_offset FROM "{schema}".offsets ORDER BY 1, 2').fetchall()}  # noqa: S608
        digests = table_digests(conn, schema)
        # PostgreSQL's own client, arguments as a list (no shell): the DSN is the configured one
        subprocess.run([pg_tool("pg_dump"), "--format=custom", f"--snapshot={snapshot}", f"--schema={schema}",  # noqa: S603
                        "--no-owner", f"--file={dst}", f"--dbname={conninfo}"], check=True, capture_output=True)
        conn.rollback()
    return [mf.file_entry(PG_DUMP, dst)], {"kind": "postgresql", "schema": schema, "offsets": offsets,
                                           "tables": digests}


def create(s: Settings, dest: Path) -> dict[str, Any]:
    """Cut every component into ``dest`` (new or empty) and write its manifest; return the manifest."""
    if dest.exists() and any(dest.iterdir()):
        raise BackupRefused(f"{dest} is not empty: give a new directory per backup")
    started = time.monotonic()
    files: list[dict[str, Any]] = []
    components: dict[str, Any] = {}
    with writers_stopped(s) as opened:
        dest.mkdir(parents=True, exist_ok=True)  # only now: a refused backup leaves nothing behind
        rm_db = opened[READ_MODEL]
        if s.read_model == "postgresql":
            pg_files, components[READ_MODEL] = _pg_cut(s, dest / PG_DUMP)
            files += pg_files
        elif rm_db is not None:
            offsets = {tp_name(*tp): o for tp, o in iter_offsets(rm_db).items()}
            files += _checkpoint_rocks(rm_db, dest / READ_MODEL / "current", f"{READ_MODEL}/current")
            components[READ_MODEL] = {"kind": "rocksdb", "offsets": offsets}
        audit_db = opened[AUDIT]
        if audit_db is not None:
            heads = audit_store.heads(audit_db)
            components[AUDIT] = {"offsets": {tp_name(*tp): h.next_offset for tp, h in heads.items()},
                                 "heads": {tp_name(*tp): {"hash": h.hash.hex(), "next_seq": h.next_seq}
                                           for tp, h in heads.items()}}
            files += _checkpoint_rocks(audit_db, dest / AUDIT, AUDIT)
        ck = local_checkpoint(s)
        if ck.is_dir():
            batch, offsets = spark_offsets(ck)
            files += _copy_tree(ck, dest / VALIDATOR, VALIDATOR, skip={"rocks/job.lock"})
            components[VALIDATOR] = {"backend": s.state_backend, "batch": batch, "offsets": offsets}
    manifest = {
        "format": mf.FORMAT, "created_at": datetime.now(UTC).isoformat(), "versions": _versions(s),
        "settings": {"read_model": s.read_model, "state_backend": s.state_backend, "partitions": s.partitions,
                     "topics": {"commands": s.topic_commands, "events": s.topic_events,
                                "rejections": s.topic_rejections}},
        "components": components, "files": files, "seconds": round(time.monotonic() - started, 3)}
    mf.write(dest, manifest)
    return manifest
