"""Erase a deleted object's document from the PostgreSQL read model: tombstone kept, gap report dropped, VACUUM."""

from __future__ import annotations

import psycopg
from psycopg import sql

from projections.db.erase import not_deleted


def erase_row(conninfo: str, schema: str, object_id: str) -> tuple[int, bool] | None:
    """Empty ``object_id``'s document (it must be deleted) and vacuum the table; return (version, deleted) or None.

    ``VACUUM`` makes the old row versions' space reusable; their bytes stay in the table's pages until reused, and
    in WAL archives and base backups: ``VACUUM FULL`` (an exclusive lock) rewrites the table (README, Erasure).
    """
    s = sql.Identifier(schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        with conn.transaction():
            row = conn.execute(sql.SQL("SELECT version, deleted FROM {}.documents WHERE id = %s FOR UPDATE")
                               .format(s), (object_id,)).fetchone()
            if row is None:
                return None
            version, deleted = int(row[0]), bool(row[1])
            if not deleted:
                raise not_deleted(object_id, version)
            conn.execute(sql.SQL("UPDATE {}.documents SET document = '{{}}'::jsonb WHERE id = %s").format(s),
                         (object_id,))
            conn.execute(sql.SQL("DELETE FROM {}.gaps WHERE object_id = %s").format(s), (object_id,))
        conn.execute(sql.SQL("VACUUM {}.documents").format(s))
        return version, deleted
