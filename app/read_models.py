"""Open the read model on the configured backend (``ARBITER_READ_MODEL``): its writer, its reader, its rebuild."""

from __future__ import annotations

from pathlib import Path

from app.local.postgres_server import LocalPostgres
from app.settings import Settings
from projections.db.port import ReadModelReader, ReadModelWriter, RebuildTarget


def read_model_root(s: Settings) -> Path:
    """The RocksDB read model's directory (``read_model_dir``, else ``<var_dir>/read_model``)."""
    return s.path(s.read_model_dir) if s.read_model_dir else s.path(s.var_dir) / "read_model"


def audit_root(s: Settings) -> Path:
    """The audit projection's store (``audit_dir``, else ``<var_dir>/audit``): ``GET /commands/{id}`` reads it too."""
    return s.path(s.audit_dir) if s.audit_dir else s.path(s.var_dir) / "audit"


def postgres_conninfo(s: Settings) -> str:
    """``ARBITER_POSTGRES_DSN``, else the local server's (``arbiter postgres start``)."""
    if s.postgres_dsn is not None and s.postgres_dsn.get_secret_value():
        return s.postgres_dsn.get_secret_value()
    return LocalPostgres.from_settings(s).conninfo()


def open_writer(s: Settings) -> ReadModelWriter:
    """The DB projection's store: the current RocksDB generation, or the PostgreSQL schema (migrated on open)."""
    if s.read_model == "postgresql":
        from projections.postgres import PgReadModelStore

        return PgReadModelStore(postgres_conninfo(s), s.postgres_schema, sync=s.projection_sync_writes)
    from projections.db import ReadModelStore

    return ReadModelStore.open_current(read_model_root(s), sync=s.projection_sync_writes)


def open_reader(s: Settings) -> ReadModelReader:
    """The read side: a RocksDB secondary of the local store, or a pool of connections to PostgreSQL."""
    if s.read_model == "postgresql":
        from projections.postgres import PgReadModel

        return PgReadModel(postgres_conninfo(s), s.postgres_schema, pool_size=s.postgres_pool_size)
    from projections.db import ReadModel

    root = read_model_root(s)
    root.mkdir(parents=True, exist_ok=True)
    return ReadModel(root)


def rebuild_target(s: Settings) -> RebuildTarget:
    """Where ``arbiter project db --rebuild`` builds before it swaps: a new generation, or a new schema."""
    if s.read_model == "postgresql":
        from projections.postgres import PgRebuildTarget

        return PgRebuildTarget(postgres_conninfo(s), s.postgres_schema)
    from projections.db.store import RocksRebuildTarget

    return RocksRebuildTarget(read_model_root(s))
