"""The read model's tables in one PostgreSQL schema, created by numbered migrations applied at start.

A migration is applied at most once per schema (``schema_version`` records it) under an advisory lock, so two
processes starting together do not race. Each schema carries a ``generation`` id in ``meta``: a rebuild fills
a fresh schema and renames it into place, and the live projection learns of the swap by that id changing.
"""

from __future__ import annotations

import os
import uuid
import zlib
from typing import Any

import psycopg
from psycopg import sql

#: (version, statements); ``{s}`` is the schema. Never edit an applied migration: add the next one.
MIGRATIONS: list[tuple[int, str]] = [
    (1, """
CREATE TABLE {s}.meta (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    generation text NOT NULL
);
CREATE TABLE {s}.documents (
    id text PRIMARY KEY,
    version bigint NOT NULL,
    deleted boolean NOT NULL,
    owner text NOT NULL,
    editors text[] NOT NULL DEFAULT '{{}}',
    readers text[] NOT NULL DEFAULT '{{}}',
    document jsonb NOT NULL,
    updated_at timestamptz
) WITH (fillfactor = 80);  -- room on each page for HOT updates: no indexed column changes
CREATE INDEX documents_owner ON {s}.documents (owner);
CREATE INDEX documents_editors ON {s}.documents USING gin (editors);
CREATE INDEX documents_readers ON {s}.documents USING gin (readers);
CREATE TABLE {s}.offsets (
    topic text NOT NULL,
    partition integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE {s}.gaps (
    object_id text PRIMARY KEY,
    detail jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE {s}.documents IS 'Arbiter read model: one row per object, written by arbiter project db';
"""),
    (2, """
ALTER TABLE {s}.documents ADD COLUMN quarantined boolean NOT NULL DEFAULT false,
                          ADD COLUMN stale boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN {s}.documents.quarantined IS 'an event''s document part broke the rule: the document is not served';
COMMENT ON COLUMN {s}.documents.stale IS 'events of the object are missing: neither document nor roles are trusted';
"""),
    (3, """
CREATE TABLE {s}.history (
    object_id text NOT NULL,
    version bigint NOT NULL,
    entry text NOT NULL,
    PRIMARY KEY (object_id, version)
);
COMMENT ON TABLE {s}.history IS 'every event that moved a view, as projections.db.history keeps it';
CREATE TABLE {s}.access (
    grantee text NOT NULL,
    role text NOT NULL,
    updated_at timestamptz NOT NULL,
    id text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (grantee, role, updated_at, id)
);
CREATE INDEX access_id ON {s}.access (id);
COMMENT ON TABLE {s}.access IS 'who may list what: projections.db.lists.access_rows of each live view';
INSERT INTO {s}.access (grantee, role, updated_at, id, version)
SELECT g.grantee, g.role, coalesce(d.updated_at, 'epoch'), d.id, d.version
FROM {s}.documents d
CROSS JOIN LATERAL (SELECT d.owner, 'o' WHERE d.owner <> '' UNION SELECT unnest(d.editors), 'e'
                    UNION SELECT unnest(d.readers), 'r') AS g (grantee, role)
WHERE NOT d.deleted AND NOT d.stale;
"""),
]


def lock_key(schema: str, purpose: str) -> int:
    """An advisory-lock key for ``purpose`` on ``schema`` (a signed 64-bit int, stable across processes)."""
    return zlib.crc32(f"arbiter:{purpose}:{schema}".encode())


#: ``application_name`` prefix of the DB projection's writer connections (a rebuild's too): how ``arbiter erase``
#: and ``arbiter backup`` tell that a projection writes the schema, PostgreSQL having no RocksDB-like LOCK file.
WRITER = "arbiter project db"
_NAME_MAX = 63  # PostgreSQL truncates application_name to NAMEDATALEN - 1 bytes


def writer_name(schema: str) -> str:
    """Return the ``application_name`` of this process's writer connections to ``schema``."""
    return f"{WRITER} pid={os.getpid()} {schema}"[:_NAME_MAX]


def running_writers(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Return the writers connected to ``schema`` (or to a rebuild of it) now, as ``<application_name> from
    <client address>``; empty when no DB projection runs."""
    rows = conn.execute("SELECT DISTINCT application_name, coalesce(host(client_addr), 'a local socket') "
                        "FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE %s "
                        "AND pid <> pg_backend_pid()", (WRITER + " pid=%",)).fetchall()
    out = []
    for name, addr in rows:
        target = str(name).split(" ", 4)[-1]
        if target == schema or target.startswith(f"{schema}_b") or (len(name) == _NAME_MAX and schema.startswith(target)):
            out.append(f"{name} from {addr}")
    return sorted(out)


def exists(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Return True if ``schema`` holds the read model's tables."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.meta",)).fetchone()
    return bool(row and row[0])


def migrate(conn: psycopg.Connection[Any], schema: str) -> list[int]:
    """Create ``schema`` if missing and apply the migrations it lacks, each in its own transaction; return them."""
    s = sql.Identifier(schema)
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "migrate"),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {}.schema_version (version integer PRIMARY KEY, "
                             "applied_at timestamptz NOT NULL DEFAULT now())").format(s))
    for version, statements in MIGRATIONS:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "migrate"),))
            done = conn.execute(sql.SQL("SELECT 1 FROM {}.schema_version WHERE version = %s").format(s),
                                (version,)).fetchone()
            if done is not None:
                continue
            conn.execute(sql.SQL(statements).format(s=s))
            if version == 1:
                conn.execute(sql.SQL("INSERT INTO {}.meta (generation) VALUES (%s)").format(s), (uuid.uuid4().hex,))
            conn.execute(sql.SQL("INSERT INTO {}.schema_version (version) VALUES (%s)").format(s), (version,))
            applied.append(version)
    return applied


def generation(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """Return the generation id of the read model in ``schema`` now, or None if there is none."""
    try:
        row = conn.execute(sql.SQL("SELECT generation FROM {}.meta").format(sql.Identifier(schema))).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return str(row[0]) if row else None
