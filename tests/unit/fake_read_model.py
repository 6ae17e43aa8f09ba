"""A read model whose answers the test sets exactly (``projections.db.ReadModel``'s ``get`` contract), for the API
unit tests that need views the real pipeline cannot produce (documents stored before today's checks refused them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class View:
    """What the API reads of an object (``projections.db.ObjectView``'s fields)."""

    document: dict[str, Any]
    version: int
    deleted: bool = False
    owner: str = "alice"
    editors: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()
    quarantined: bool = False
    stale: bool = False


@dataclass
class FakeReadModel:
    """Returns the view stored under an id, None for any other: nothing is projected, nothing lags."""

    views: dict[str, View] = field(default_factory=dict)

    def get(self, object_id: str) -> View | None:
        return self.views.get(object_id)
