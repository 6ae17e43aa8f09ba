"""One object as the read model holds it, and its stored bytes (canonical JSON, so equal views store equal bytes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from projections.db import fastjson


@dataclass(frozen=True, slots=True)
class ObjectView:
    """An object's document at ``version``; a deleted object keeps its version and an empty document."""

    document: dict[str, Any]
    version: int
    deleted: bool = False
    owner: str = ""
    updated_at: str | None = field(default=None, compare=False)

    def to_bytes(self) -> bytes:
        return fastjson.dumps({"v": self.version, "del": self.deleted, "owner": self.owner, "at": self.updated_at,
                               "doc": self.document})

    @classmethod
    def from_bytes(cls, data: bytes) -> ObjectView:
        d = fastjson.loads(data)
        return cls(document=d["doc"], version=d["v"], deleted=d["del"], owner=d["owner"], updated_at=d["at"])
