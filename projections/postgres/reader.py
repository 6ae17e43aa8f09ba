"""Read the PostgreSQL read model from any process on any host (the API): one pooled query per read.

Each read is one autocommit statement, so it sees whole batches only (the projection commits a batch in one
transaction) and, across a rebuild, either the old schema or the new one, never a half-built model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from projections.db.port import TP, ReadModelUnavailable
from projections.db.view import ObjectView, StoredView
from projections.postgres.rows import COLUMNS, from_row, stored_from_row


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.autocommit = True
    conn.execute("SET TimeZone = 'UTC'")  # updated_at reads back as the writer's UTC ISO text


class PgReadModel:
    """Read-only access to the read model in ``schema``; thread-safe (a pool of ``pool_size`` connections)."""

    blocking = True  # each read is a network round trip: the API calls it off its event loop

    def __init__(self, conninfo: str, schema: str, *, pool_size: int = 4, timeout_s: float = 2.0) -> None:
        self.schema = schema
        s = sql.Identifier(schema)
        self._get = sql.SQL("SELECT {} FROM {}.documents WHERE id = %s").format(COLUMNS, s)
        self._all = sql.SQL('SELECT {} FROM {}.documents ORDER BY id COLLATE "C"').format(COLUMNS, s)
        self._gaps = sql.SQL("SELECT object_id, detail::text FROM {}.gaps").format(s)
        self._offsets = sql.SQL("SELECT topic, partition, next_offset FROM {}.offsets").format(s)
        # open=True without waiting: the API starts (and answers 503 on reads) while the database is down.
        self._pool = ConnectionPool(conninfo, min_size=1, max_size=pool_size, open=True, timeout=timeout_s,
                                    configure=_configure, name=f"read-model-reader-{schema}")

    def _rows(self, query: sql.Composed, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._pool.connection() as conn:
                rows: list[tuple[Any, ...]] = conn.execute(query, params).fetchall()
                return rows
        except psycopg.errors.UndefinedTable:
            return []  # the projection has not created the read model yet: nothing was ever created
        except (psycopg.OperationalError, PoolTimeout) as e:
            raise ReadModelUnavailable(f"the read model's database cannot be reached: {e}") from e

    def get(self, object_id: str) -> ObjectView | None:
        rows = self._rows(self._get, (object_id,))
        return from_row(rows[0])[1] if rows else None

    def lookup(self, object_id: str) -> StoredView | None:
        """Like ``get``, but the document's text is decoded only when read: check access first (the API does)."""
        rows = self._rows(self._get, (object_id,))
        return stored_from_row(rows[0]) if rows else None

    def views(self) -> Iterator[tuple[str, ObjectView]]:
        for row in self._rows(self._all):
            yield from_row(row)

    def gaps(self) -> dict[str, str]:
        return {str(oid): str(detail) for oid, detail in self._rows(self._gaps)}

    def offsets(self) -> dict[TP, int]:
        """Return the projection's next offset per partition, committed in the transaction of its documents."""
        return {(str(t), int(p)): int(o) for t, p, o in self._rows(self._offsets)}

    def ready(self) -> bool:
        try:
            with self._pool.connection() as conn:
                row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.documents",)).fetchone()
        except (psycopg.OperationalError, PoolTimeout):
            return False
        return bool(row and row[0])

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> PgReadModel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
