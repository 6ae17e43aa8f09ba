"""A rebuild into a fresh schema ``<schema>_b<ns>``, renamed into place in one transaction when caught up."""

from __future__ import annotations

import logging
import time

import psycopg
from psycopg import sql

from projections.postgres import schema as pgschema
from projections.postgres.store import PgReadModelStore

log = logging.getLogger(__name__)


class PgRebuildTarget:
    """Fill ``<schema>_b<ns>`` (no synchronous commit while building), then swap it in and drop the old schema."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self.conninfo, self.schema = conninfo, schema
        self.build: str | None = None

    def fresh(self) -> PgReadModelStore:
        self.build = f"{self.schema}_b{time.time_ns()}"
        return PgReadModelStore(self.conninfo, self.build, sync=False)

    def swap_in(self) -> str:
        """Rename the built schema to ``schema`` and drop the old one, in one transaction.

        The transaction takes the writers' advisory lock exclusively, so no live batch is half-way through the
        old schema when the names move; readers see the old schema or the new one, and the old one is dropped
        only once no statement uses it. Its commit is synchronous, which makes the build's earlier, unsynchronised
        commits durable too (the WAL is flushed in order).
        """
        assert self.build is not None, "fresh() first"
        old = f"{self.schema}_old{time.time_ns()}"
        with psycopg.connect(self.conninfo, autocommit=True) as conn, conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = on")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (pgschema.lock_key(self.schema, "swap"),))
            had = pgschema.exists(conn, self.schema)
            if had:
                conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(self.schema),
                                                                             sql.Identifier(old)))
            else:  # a leftover schema without the tables (never the case for a migrated one)
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))
            conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(sql.Identifier(self.build),
                                                                         sql.Identifier(self.schema)))
            if had:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(old)))
        log.info("rebuild: schema %s swapped in as %s", self.build, self.schema)
        return f"{self.schema} (built as {self.build})"
