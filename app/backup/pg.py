"""The PostgreSQL read model's part of a backup: a digest of each table's rows, and the restore of a dump."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql


def table_digests(conn: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    """SHA-256 over each table's rows as text, in C-collation order, times in UTC: equal tables, equal digests.

    Every table of the schema, so tables other features add are covered without naming them here.
    """
    conn.execute("SET TIME ZONE 'UTC'")
    tables = [r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)).fetchall()]
    out: dict[str, str] = {}
    for table in tables:
        h = hashlib.sha256()
        query = sql.SQL('SELECT t::text COLLATE "C" AS row FROM {}.{} t ORDER BY 1').format(
            sql.Identifier(schema), sql.Identifier(table))
        with conn.cursor() as cur:
            for (row,) in cur.execute(query):
                h.update(row.encode())
                h.update(b"\n")
        out[table] = h.hexdigest()
    return out


def current_digests(conninfo: str, schema: str) -> dict[str, str]:
    with psycopg.connect(conninfo) as conn:
        return table_digests(conn, schema)


def restore_dump(conninfo: str, schema: str, dump: Path, pg_restore: str) -> None:
    """Replace ``schema`` by the dump's: move the live one aside, ``pg_restore`` in one transaction, then drop the
    old one; if the restore fails, the old schema is moved back (nothing lost) and the error raised."""
    aside = f"{schema}_o{time.time_ns()}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        had = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None
        if had:
            conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(schema), sql.Identifier(aside)))
        try:
            # PostgreSQL's own client, arguments as a list (no shell)
            subprocess.run([pg_restore, "--single-transaction", "--no-owner", "--exit-on-error",  # noqa: S603
                            f"--dbname={conninfo}", str(dump)], check=True, capture_output=True)
        except BaseException:
            if had:
                conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(aside),
                                                                            sql.Identifier(schema)))
            raise
        if had:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(aside)))
