"""Read the PostgreSQL read model from any process on any host (the API): one pooled query per read.

Each read is one autocommit statement, so it sees whole batches only (the projection commits a batch in one
transaction) and, across a rebuild, either the old schema or the new one, never a half-built model.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from projections.db.history import HistoryEntry
from projections.db.lists import MAX_US, ListItem, Page, Role, micros
from projections.db.port import TP, ReadModelUnavailable
from projections.db.view import ObjectView, StoredView
from projections.postgres.rows import COLUMNS, from_row, stored_from_row


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.autocommit = True
    conn.execute("SET TimeZone = 'UTC'")  # updated_at reads back as the writer's UTC ISO text


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
        self._history = sql.SQL("SELECT version, entry FROM {}.history WHERE object_id = %s AND version > %s "
                                "AND version <= %s ORDER BY version LIMIT %s").format(s)
        # One index range scan per (grantee, role), each stopped at the page's length, merged and made distinct.
        self._range = sql.SQL("(SELECT updated_at, id, version FROM {}.access WHERE grantee = %s AND role = %s "
                              "AND (updated_at, id) > (%s, %s) ORDER BY updated_at, id LIMIT %s)").format(s)
        # The statistics' live-row count: kept as rows are written, without a count(*) over the table.
        self._size = sql.SQL("SELECT pg_total_relation_size(relid), n_live_tup FROM pg_stat_user_tables "
                             "WHERE relid = to_regclass(%s)")
        # open=True without waiting: the API starts (and answers 503 on reads) while the database is down.
        self._pool = ConnectionPool(conninfo, min_size=1, max_size=pool_size, open=True, timeout=timeout_s,
                                    configure=_configure, name=f"read-model-reader-{schema}")

    def _rows(self, query: sql.SQL | sql.Composed, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
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

    def history(self, object_id: str, after: int = 0, limit: int | None = None,
                up_to: int | None = None) -> list[HistoryEntry]:
        """Return the object's history entries with ``after < version <= up_to``, oldest first, at most ``limit``."""
        rows = self._rows(self._history, (object_id, after, up_to if up_to is not None else 2**63 - 1, limit))
        return [HistoryEntry(int(v), str(e).encode()) for v, e in rows]

    def page(self, ranges: list[tuple[str, Role]], since_us: int, after: tuple[int, str] | None,
             limit: int) -> Page:
        """Return one page of the ``access`` table over ``ranges`` (``projections.db.lists``), each object once."""
        if not ranges:
            return Page([], False)
        # After (since, "") excludes nothing changed at ``since``: every id sorts after "" ("C" collation).
        at, oid = (after[0], after[1]) if after is not None and after >= (since_us, "") else (since_us, "")
        if at > MAX_US:  # later than any time a view holds (and than a datetime): nothing changed since
            return Page([], False)
        start = _EPOCH + timedelta(microseconds=at)
        query = sql.SQL("SELECT DISTINCT ON (updated_at, id) updated_at, id, version FROM ({}) u "
                        "ORDER BY updated_at, id LIMIT %s").format(sql.SQL(" UNION ALL ").join([self._range] * len(ranges)))
        params: list[object] = []
        for grantee, role in ranges:
            params += [grantee, role.code, start, oid, limit + 1]
        rows = self._rows(query, (*params, limit + 1))
        items = [ListItem(str(i), int(v), micros(t.isoformat())) for t, i, v in rows]
        return Page(items[:limit], len(items) > limit)

    def history_size(self) -> dict[str, int]:
        """Return the ``history`` table's size: ``bytes`` on disk (indexes included) and PostgreSQL's live-row count
        (its statistics, which trail the writes by a moment)."""
        rows = self._rows(self._size, (f"{self.schema}.history",))
        return {"events": int(rows[0][1]), "bytes": int(rows[0][0])} if rows else {"events": 0, "bytes": 0}

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
