"""Backup, restore and erasure on the PostgreSQL read model, run as a user runs them: ``arbiter backup
create|verify|restore`` and ``arbiter erase`` through the command line (one of them in a subprocess), against the
session's real PostgreSQL server (no broker, no Spark: the read model and the audit store are filled through the
projections' own code)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from pydantic import SecretStr

from app.backup.pg import current_digests, restore_dump
from app.cli import main
from app.local.postgres_server import LocalPostgres
from app.read_models import audit_root, open_writer, postgres_conninfo
from app.settings import Settings, get_settings
from projections.audit import AuditProjection, verify
from projections.db import DbProjection
from projections.postgres import PgReadModel
from projections.postgres.schema import running_writers
from projections.runner import Item
from tests.unit.erasure_support import MARKS, api, check_erased, erasure_items

pytestmark = pytest.mark.integration


@pytest.fixture
def pg(postgres: LocalPostgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Settings on a fresh database, also in this process's environment (for ``arbiter``'s ``get_settings``)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    dsn = postgres.create_database(name)
    env = {"ARBITER_VAR_DIR": str(tmp_path / "var"), "ARBITER_READ_MODEL": "postgresql", "ARBITER_POSTGRES_DSN": dsn}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    get_settings.cache_clear()
    try:
        yield Settings(**{"var_dir": tmp_path / "var", "read_model": "postgresql", "postgres_dsn": SecretStr(dsn)})
    finally:
        get_settings.cache_clear()
        postgres.drop_database(name)


def arbiter(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run ``arbiter <argv>`` in this process; return its exit code and what it printed (stdout and stderr)."""
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _count(s: Settings, query: str) -> int:
    with psycopg.connect(postgres_conninfo(s)) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def _writers_gone(s: Settings) -> None:
    """Wait until the server has ended the closed projection's backends (a moment after the client closed them)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(postgres_conninfo(s), autocommit=True) as conn:
        while running_writers(conn, s.postgres_schema):
            assert time.monotonic() < deadline, running_writers(conn, s.postgres_schema)
            time.sleep(0.02)


def test_backup_erase_and_restore_on_postgresql_through_the_cli(pg: Settings, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    items = erasure_items(pg.topic_events)
    audit = AuditProjection(audit_root(pg))
    audit.apply([Item(it.record, None, "x") for it in items])
    audit.close()
    code, out = arbiter(capsys, "erase", "gone")  # deleted, but no read model yet: refused, nothing erased
    assert code == 2 and "[ERASE_READ_MODEL_MISSING]" in out and "(PostgreSQL) does not exist" in out, out
    projection = DbProjection(open_writer(pg))
    projection.apply(items)
    backup = tmp_path / "backup"
    try:
        code, out = arbiter(capsys, "backup", "create", str(backup))
        assert code == 2 and "[BACKUP_REFUSED]" in out and "the DB projection (PostgreSQL connection arbiter " \
            "project db pid=" in out and not backup.exists(), out
        code, out = arbiter(capsys, "erase", "gone")
        assert code == 2 and "[READ_MODEL_BUSY]" in out, out
    finally:
        projection.close()
    _writers_gone(pg)
    code, out = arbiter(capsys, "erase", "kept")  # live: the audit trail holds no deletion of it
    assert code == 2 and "[ERASE_NOT_DELETED]" in out and "holds no DELETED event of object 'kept'" in out, out

    # the installed console script, in a process of its own, as an operator runs it
    run = subprocess.run([str(Path(sys.executable).parent / "arbiter"), "backup", "create", str(backup)],
                         capture_output=True, text=True, env=dict(os.environ), timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert f"read_model: offsets {pg.topic_events}[0]=6" in run.stdout and "audit: offsets" in run.stdout
    digests = current_digests(postgres_conninfo(pg), pg.postgres_schema)
    code, out = arbiter(capsys, "backup", "verify", str(backup))
    assert code == 0 and "backup matches its manifest" in out, out

    code, out = arbiter(capsys, "erase", "gone", "--reason", "request #7")
    assert code == 0 and "tombstone kept at version 4, document erased" in out, out
    assert _count(pg, "SELECT count(*) FROM read_model.history WHERE object_id = 'gone'") == 0
    assert _count(pg, "SELECT count(*) FROM read_model.access WHERE id = 'gone'") == 0
    assert _count(pg, "SELECT count(*) FROM read_model.history WHERE object_id = 'kept'") == 2
    assert _count(pg, f"SELECT count(*) FROM read_model.documents WHERE document::text LIKE '%{MARKS[0]}%'") == 0
    erased = current_digests(postgres_conninfo(pg), pg.postgres_schema)
    reader = PgReadModel(postgres_conninfo(pg), pg.postgres_schema)
    try:
        check_erased(api(pg, reader), pg)
    finally:
        reader.close()
    assert verify(audit_root(pg)).ok

    # a restore whose pg_restore fails leaves the live schema as it was
    with pytest.raises(subprocess.CalledProcessError):
        restore_dump(postgres_conninfo(pg), pg.postgres_schema, backup / "read_model.pgdump", "/bin/false")
    assert current_digests(postgres_conninfo(pg), pg.postgres_schema) == erased

    # lose everything the backup covers, then restore it (which brings the erased object back: docs/operations/erasure.md)
    with psycopg.connect(postgres_conninfo(pg), autocommit=True) as conn:
        conn.execute("DROP SCHEMA read_model CASCADE")
    shutil.rmtree(audit_root(pg))
    code, out = arbiter(capsys, "backup", "restore", str(backup))
    assert code == 0 and "all match" in out, out
    assert current_digests(postgres_conninfo(pg), pg.postgres_schema) == digests
    assert _count(pg, "SELECT count(*) FROM read_model.history WHERE object_id = 'gone'") == 4
    code, out = arbiter(capsys, "backup", "verify", "--restored", str(backup))
    assert code == 0 and "restored copy matches its manifest" in out, out
    assert verify(audit_root(pg)).ok
