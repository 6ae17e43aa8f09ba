"""The read model in PostgreSQL: one row per object, offsets in the same transaction, rebuilt by a schema swap."""

from projections.postgres.reader import PgReadModel
from projections.postgres.rebuild import PgRebuildTarget
from projections.postgres.store import PgReadModelStore

__all__ = ["PgReadModel", "PgReadModelStore", "PgRebuildTarget"]
