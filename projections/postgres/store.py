"""The DB projection's PostgreSQL writer: a batch's documents, next offsets and gaps in one transaction.

A batch is one ``COPY`` of typed rows into a temporary staging table and one ``INSERT … SELECT … ON CONFLICT DO
UPDATE``, guarded by version so an older view never overwrites a newer one. The write holds a shared advisory lock and
first checks the schema's generation: a rebuild's swap takes the same lock exclusively, so a batch is written
wholly to the schema it started on, or (``ReadModelSwapped``) not at all.

Transactions run write-behind (``write_behind.py``): in a background thread while the projection folds the next
batch, batches arriving meanwhile merged into one. They commit in order, a failure comes out of the next call,
and reads wait only for objects not yet committed (the projection holds the others in its cache).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from projections.db.port import TP, HistoryRow, ReadModelSwapped
from projections.db.view import ObjectView
from projections.postgres import schema as pgschema
from projections.postgres.rows import COLUMNS, copy_line, from_row
from projections.postgres.write_behind import Batch, WriteBehind

log = logging.getLogger(__name__)

_UPSERT = """
INSERT INTO {s}.documents AS d SELECT * FROM pg_temp.arbiter_stage
ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, deleted = EXCLUDED.deleted, owner = EXCLUDED.owner,
    editors = EXCLUDED.editors, readers = EXCLUDED.readers, document = EXCLUDED.document,
    updated_at = EXCLUDED.updated_at, quarantined = EXCLUDED.quarantined, stale = EXCLUDED.stale
WHERE d.version < EXCLUDED.version
"""
_OFFSETS = """
INSERT INTO {s}.offsets (topic, partition, next_offset)
SELECT * FROM unnest(%s::text[], %s::integer[], %s::bigint[])
ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset
"""
_HISTORY = """
INSERT INTO {s}.history (object_id, version, entry)
SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[])
ON CONFLICT (object_id, version) DO NOTHING
"""
# The access rows of the staged ids, from what ``documents`` now holds for them (the upsert may have kept a newer
# row): the same rows as ``projections.db.lists.access_rows``.
_ACCESS_DELETE = "DELETE FROM {s}.access a USING pg_temp.arbiter_stage st WHERE a.id = st.id"
_ACCESS_INSERT = """
INSERT INTO {s}.access (grantee, role, updated_at, id, version)
SELECT g.grantee, g.role, coalesce(d.updated_at, 'epoch'), d.id, d.version
FROM {s}.documents d JOIN pg_temp.arbiter_stage st ON st.id = d.id
CROSS JOIN LATERAL (SELECT d.owner, 'o' WHERE d.owner <> '' UNION SELECT unnest(d.editors), 'e'
                    UNION SELECT unnest(d.readers), 'r') AS g (grantee, role)
WHERE NOT d.deleted AND NOT d.stale
"""
_GAPS = """
INSERT INTO {s}.gaps (object_id, detail)
SELECT o, d::jsonb FROM unnest(%s::text[], %s::text[]) AS u (o, d)
ON CONFLICT (object_id) DO UPDATE SET detail = EXCLUDED.detail, recorded_at = now()
"""


def _configure(sync: bool) -> Callable[[psycopg.Connection[Any]], None]:
    def configure(conn: psycopg.Connection[Any]) -> None:
        # synchronous_commit off (a rebuild, or ARBITER_PROJECTION_SYNC_WRITES=false): a crash may lose the last
        # commits, never half of one, and offsets are lost with their documents, so the replay refills them.
        conn.execute("SET synchronous_commit = " + ("on" if sync else "off"))
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS arbiter_stage (id text, version bigint, deleted boolean, owner text, "
                     "editors text[], readers text[], document jsonb, updated_at timestamptz, quarantined boolean, "
                     "stale boolean) ON COMMIT DELETE ROWS")
        conn.commit()
    return configure


class PgReadModelStore:
    """The writer of the read model in ``schema`` (created and migrated on open); one projection at a time."""

    def __init__(self, conninfo: str, schema: str, *, sync: bool = True, max_rows: int = 20_000) -> None:
        self.conninfo, self.schema, self.sync = conninfo, schema, sync
        self._s = sql.Identifier(schema)
        self._upsert = sql.SQL(_UPSERT).format(s=self._s)
        self._offsets = sql.SQL(_OFFSETS).format(s=self._s)
        self._gaps = sql.SQL(_GAPS).format(s=self._s)
        self._history = sql.SQL(_HISTORY).format(s=self._s)
        self._access = [sql.SQL(q).format(s=self._s) for q in (_ACCESS_DELETE, _ACCESS_INSERT)]
        self._select = sql.SQL("SELECT {} FROM {}.documents WHERE id = ANY(%s)").format(COLUMNS, self._s)
        self._lock = pgschema.lock_key(schema, "swap")
        with psycopg.connect(conninfo, autocommit=True) as conn:
            applied = pgschema.migrate(conn, schema)
            gen = pgschema.generation(conn, schema)
        if applied:
            log.info("read model: schema %s migrated to version %d", schema, applied[-1])
        assert gen is not None
        self.generation = gen
        # Two connections: the batch being written, and reads of other objects meanwhile.
        self._pool = ConnectionPool(conninfo, min_size=2, max_size=2, open=True, configure=_configure(sync),
                                    kwargs={"application_name": pgschema.writer_name(schema)},
                                    name=f"read-model-writer-{schema}")
        self._pool.wait(timeout=30)
        self._behind = WriteBehind(self._write, max_rows=max_rows, name=f"read-model-writer-{schema}")

    def get_many(self, object_ids: Iterable[str]) -> dict[str, ObjectView | None]:
        ids = list(object_ids)
        if self._behind.holds(ids):
            self._behind.flush()
        out: dict[str, ObjectView | None] = dict.fromkeys(ids)
        if ids:
            with self._pool.connection() as conn:
                for row in conn.execute(self._select, (ids,)):
                    oid, view = from_row(row)
                    out[oid] = view
        return out

    def offsets(self) -> dict[TP, int]:
        self._behind.flush()
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT topic, partition, next_offset FROM {}.offsets").format(self._s))
            return {(t, p): o for t, p, o in rows}

    def write(self, views: dict[str, ObjectView], offsets: dict[TP, int], gaps: dict[str, str],
              history: list[HistoryRow] | None = None,
              previous: dict[str, ObjectView | None] | None = None) -> None:
        """Queue the batch for the background writer; raise the error of an earlier batch that failed.

        ``previous`` is not needed: the access rows of a written id are replaced from its stored row.
        """
        self._behind.put(views, offsets, gaps, history)

    def _write(self, batch: Batch) -> None:
        views, offsets, gaps, history = batch.views, batch.offsets, batch.gaps, batch.history
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (self._lock,))
            gen = pgschema.generation(conn, self.schema)
            if gen != self.generation:
                raise ReadModelSwapped(f"schema {self.schema} is now generation {gen}, this store wrote {self.generation}")
            if views:
                with conn.cursor().copy("COPY pg_temp.arbiter_stage FROM STDIN") as copy:
                    copy.write("".join([copy_line(oid, v) for oid, v in views.items()]))
                conn.execute(self._upsert)
                for statement in self._access:
                    conn.execute(statement)
            if history:
                conn.execute(self._history, ([o for o, _, _ in history], [v for _, v, _ in history],
                                             [e.decode() for _, _, e in history]))
            if offsets:
                tps = list(offsets)
                conn.execute(self._offsets, ([t for t, _ in tps], [p for _, p in tps], [offsets[tp] for tp in tps]))
            if gaps:
                conn.execute(self._gaps, (list(gaps), list(gaps.values())))

    def successor(self) -> PgReadModelStore | None:
        """If a rebuild renamed another schema into place, return a writer on it (this one closed, what it had
        queued dropped: the new schema's offsets say where to resume). Called between batches: it does not wait
        for the batch in flight."""
        try:
            self._behind.poll()
            swapped = False
        except ReadModelSwapped:
            swapped = True
        with self._pool.connection() as conn:
            gen = pgschema.generation(conn, self.schema)
        if not swapped and (gen is None or gen == self.generation):
            return None
        self._behind.discard()
        self.close()
        log.info("db projection: read model schema %s swapped to generation %s", self.schema, gen)
        return PgReadModelStore(self.conninfo, self.schema, sync=self.sync)

    def views(self) -> list[tuple[str, ObjectView]]:
        self._behind.flush()
        with self._pool.connection() as conn:
            return [from_row(r) for r in conn.execute(
                sql.SQL('SELECT {} FROM {}.documents ORDER BY id COLLATE "C"').format(COLUMNS, self._s))]

    def close(self) -> None:
        """Commit what is queued (raising its error), then close the connections."""
        try:
            self._behind.close()
        finally:
            self._pool.close()
