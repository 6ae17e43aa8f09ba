"""Time and size of ``arbiter backup create``, ``verify``, ``restore`` and ``verify --restored`` on a read model and
an audit store of N objects, against the plain tools copying the same data in the same run.

The read model is filled through the DB projection's code (``DbProjection.apply``: views, history and the access
index, as in production) and the audit store through the audit projection's (``AuditProjection.apply``: one chained
entry per event, its Avro body as the value), from events made by ``commands.decide`` (``bench.projections.lists``),
with no Kafka and no Spark. No validator checkpoint is cut (its size is the state store's, not the objects'). Then:
create, verify, destroy the stores, restore (which verifies the backup first and re-hashes what it wrote), verify
--restored. The baseline: ``cp -r`` of the same directories (RocksDB: the read model's generation and the audit
store; PostgreSQL: the audit store, plus ``pg_dump --format=custom`` of the schema), then the way back (``cp -r``;
``pg_restore --single-transaction``). Page cache warm for both: the figures compare work, not disks.

Run: ``.venv/bin/python -m bench.backup --objects 1000000`` (``--backend rocksdb|postgresql``; PostgreSQL uses
``ARBITER_POSTGRES_DSN`` if set, else starts a throwaway server, stopped by its PID).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from pydantic import SecretStr

from app.backup.cut import create, pg_tool
from app.backup.restore import restore, verify_backup, verify_restored
from app.read_models import audit_root, postgres_conninfo, read_model_root
from app.settings import Settings
from bench.harness import postgres_databases
from bench.projections.lists import fill
from commands import Event
from projections.audit import AuditProjection
from projections.db.store import current_generation
from schemas.compiled import encode_event


def avro_body(ev: Event) -> bytes:
    body = bytearray()
    encode_event(body, ev)
    return bytes(body)


def size(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path`` (a file counts as itself)."""
    if path.is_file():
        return path.stat().st_size, 1
    files = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)  # noqa: S603 - our own arguments, no shell


def _drop_schema(s: Settings) -> None:
    with psycopg.connect(postgres_conninfo(s), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{s.postgres_schema}" CASCADE')


def baseline(s: Settings, work: Path) -> tuple[float, float, int]:
    """Copy what the backup covers with the plain tools, and back; return (seconds out, seconds back, bytes)."""
    out = work / "plain"
    out.mkdir()
    rocks = s.read_model == "rocksdb"
    gen = current_generation(read_model_root(s))
    t0 = time.perf_counter()
    sh("cp", "-r", str(audit_root(s)), str(out / "audit"))
    if rocks:
        assert gen is not None
        sh("cp", "-r", str(gen), str(out / "read_model"))
    else:
        sh(pg_tool("pg_dump"), "--format=custom", f"--schema={s.postgres_schema}", "--no-owner",
           f"--file={out / 'read_model.pgdump'}", f"--dbname={postgres_conninfo(s)}")
    t_out = time.perf_counter() - t0
    nbytes = size(out)[0]
    back = work / "plain-back"
    back.mkdir()
    t0 = time.perf_counter()
    sh("cp", "-r", str(out / "audit"), str(back / "audit"))
    if rocks:
        sh("cp", "-r", str(out / "read_model"), str(back / "read_model"))
    else:
        _drop_schema(s)
        sh(pg_tool("pg_restore"), "--single-transaction", "--no-owner", "--exit-on-error",
           f"--dbname={postgres_conninfo(s)}", str(out / "read_model.pgdump"))
    t_back = time.perf_counter() - t0
    shutil.rmtree(out)
    shutil.rmtree(back)
    return t_out, t_back, nbytes


def run(s: Settings, work: Path, args: argparse.Namespace) -> None:
    took, n = fill(s, args.objects, args.principals, args.updates, args.batch)
    print(f"{s.read_model}: read model filled with {n:,} events in {took:.1f} s")
    audit = AuditProjection(audit_root(s), sync=False)  # one chained entry per event, its Avro body the value
    took, n = fill(s, args.objects, args.principals, args.updates, args.batch, audit, avro_body)
    print(f"{s.read_model}: audit store filled with {n:,} entries in {took:.1f} s")
    rm_bytes, rm_files = size(read_model_root(s)) if s.read_model == "rocksdb" else (0, 0)
    audit_bytes, audit_files = size(audit_root(s))
    print(f"  read model {rm_bytes / 1e6:,.1f} MB in {rm_files} files" if s.read_model == "rocksdb" else
          "  read model in PostgreSQL (schema " + s.postgres_schema + ")")
    print(f"  audit store {audit_bytes / 1e6:,.1f} MB in {audit_files} files")

    plain_out, plain_back, plain_bytes = baseline(s, work)
    dest = work / "backup"
    t_create, manifest = timed(lambda: create(s, dest))
    backup_bytes, backup_files = size(dest)
    linked = sum(1 for p in dest.rglob("*.sst") if p.stat().st_nlink > 1)
    t_verify, checked = timed(lambda: verify_backup(dest))
    assert checked.ok, checked.problems[:5]
    if s.read_model == "rocksdb":
        shutil.rmtree(read_model_root(s))
    else:
        _drop_schema(s)
    shutil.rmtree(audit_root(s))
    t_restore, restored = timed(lambda: restore(s, dest))
    assert restored.ok, restored.problems[:5]
    t_again, again = timed(lambda: verify_restored(s, dest))
    assert again.ok, again.problems[:5]
    mb = backup_bytes / 1e6
    rows = [("backup create", t_create), ("backup verify", t_verify), ("backup restore (verifies first, re-hashes "
            "after)", t_restore), ("backup verify --restored", t_again)]
    print(f"  backup: {mb:,.1f} MB in {backup_files} files ({len(manifest['files'])} in the manifest); plain copy "
          f"{plain_bytes / 1e6:,.1f} MB" + (f"; {linked} SST files hard-linked by RocksDB's checkpoint (backup on the "
                                           "stores' filesystem: create copied only the rest)" if linked else ""))
    for name, t in rows:
        print(f"  {name:<48} {t:8.2f} s  {mb / t:8.1f} MB/s")
    print(f"  {'baseline out (cp -r' + (')' if s.read_model == 'rocksdb' else ', pg_dump)'):<48} {plain_out:8.2f} s")
    print(f"  {'baseline back (cp -r' + (')' if s.read_model == 'rocksdb' else ', pg_restore)'):<48} "
          f"{plain_back:8.2f} s")
    print(f"  ratio: create / baseline out {t_create / plain_out:.2f}; restore / baseline back "
          f"{t_restore / plain_back:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--principals", type=int, default=2_000)
    ap.add_argument("--updates", type=int, default=2, help="updates per object after its create and two grants")
    ap.add_argument("--batch", type=int, default=5000, help="events per projection batch while filling")
    ap.add_argument("--backend", default="rocksdb", choices=["rocksdb", "postgresql"])
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="bench-backup-"))
    work.chmod(0o755)  # the throwaway PostgreSQL server runs as the postgres user under root
    print(f"{args.objects:,} objects, {3 + args.updates} events each; {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} CPUs")
    with bench_settings(args.backend, work) as s:
        run(s, work, args)


@contextmanager
def bench_settings(backend: str, work: Path) -> Iterator[Settings]:
    """Settings under ``work`` on ``backend`` (PostgreSQL: a fresh schema), ``work`` deleted after."""
    s = Settings(var_dir=work / "var", read_model=backend, projection_sync_writes=False, topic_events="bench-events")
    try:
        with postgres_databases(work) as database:
            if backend == "postgresql":
                name = f"bench_{uuid.uuid4().hex[:8]}"
                s = s.model_copy(update={"postgres_dsn": SecretStr(database(name)), "postgres_schema": name})
            yield s
    finally:
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
