"""The DB read model: documents and consumed offsets in one rocksdict store, read by the API through a secondary."""

from projections.db.apply import ApplyResult, Status, apply_event
from projections.db.projection import DbProjection
from projections.db.reader import ReadModel
from projections.db.store import ReadModelStore
from projections.db.view import ObjectView

__all__ = ["ApplyResult", "DbProjection", "ObjectView", "ReadModel", "ReadModelStore", "Status", "apply_event"]
