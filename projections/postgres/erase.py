"""Erase a deleted object's documents from the PostgreSQL read model: tombstone kept, history and gap report
dropped, VACUUM."""

from __future__ import annotations

import psycopg
from psycopg import sql

from projections.db.erase import ReadModelBusy, missing, not_deleted, not_projected
from projections.postgres.schema import exists, running_writers

#: What ``erase_row`` vacuums: the tables whose old row versions held the object's documents (or its list rows).
_VACUUMED = ("documents", "history", "access")


def erase_row(conninfo: str, schema: str, object_id: str) -> tuple[int, bool]:
    """Empty ``object_id``'s document and delete its history (it must be deleted, and no DB projection may
    write the schema: ``READ_MODEL_BUSY``), vacuum; return (version, deleted).

    Refused as ``projections.db.erase.erase_view`` refuses: no schema or no object in it, the object not in it, or
    live.

    One transaction: a reader sees the object's history whole or erased whole. Its ``access`` rows went when it was
    deleted; any left (a store written before that held) are deleted too. ``VACUUM`` makes the old row versions'
    space reusable; their bytes stay in the tables' pages until reused, and in WAL archives and base backups:
    ``VACUUM FULL`` (an exclusive lock) rewrites a table (docs/operations/erasure.md).
    """
    s = sql.Identifier(schema)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        writers = running_writers(conn, schema)
        if writers:
            raise ReadModelBusy(f"the DB projection writes the read model {schema} ({'; '.join(writers)}): stop it "
                                "first; nothing was erased")
        where = f"{schema} (PostgreSQL)"
        if not exists(conn, schema):
            raise missing(where, "does not exist")
        with conn.transaction():
            row = conn.execute(sql.SQL("SELECT version, deleted FROM {}.documents WHERE id = %s FOR UPDATE")
                               .format(s), (object_id,)).fetchone()
            if row is None:
                if conn.execute(sql.SQL("SELECT 1 FROM {}.documents LIMIT 1").format(s)).fetchone() is None:
                    raise missing(where, "holds no object")
                raise not_projected(object_id, where)
            version, deleted = int(row[0]), bool(row[1])
            if not deleted:
                raise not_deleted(object_id, version)
            conn.execute(sql.SQL("UPDATE {}.documents SET document = '{{}}'::jsonb WHERE id = %s").format(s),
                         (object_id,))
            conn.execute(sql.SQL("DELETE FROM {}.gaps WHERE object_id = %s").format(s), (object_id,))
            conn.execute(sql.SQL("DELETE FROM {}.history WHERE object_id = %s").format(s), (object_id,))
            conn.execute(sql.SQL("DELETE FROM {}.access WHERE id = %s").format(s), (object_id,))
        for table in _VACUUMED:
            conn.execute(sql.SQL("VACUUM {}.{}").format(s, sql.Identifier(table)))
        return version, deleted
