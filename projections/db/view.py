"""One object as the read model holds it, and its stored bytes (canonical JSON, so equal views store equal bytes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from projections.db import fastjson


@dataclass(frozen=True, slots=True)
class ObjectView:
    """An object's document at ``version`` and who may read it; a deleted object keeps its version, its
    roles (owner, editors and readers are told it was deleted, others that it does not exist) and an empty
    document.

    Views stored before roles were kept read back with no editors or readers: rebuild the read model
    (``arbiter project db --rebuild``) to fill them in from the events.

    ``quarantined``: an event's document part could not be applied (``projections.db.apply``); roles, version and
    deletion are current, the document is not, and is never served. ``stale``: events of the object are missing
    (a gap); neither the document nor the roles can be trusted, only a deletion still lands. Both are sticky.
    """

    document: dict[str, Any]
    version: int
    deleted: bool = False
    owner: str = ""
    updated_at: str | None = field(default=None, compare=False)
    editors: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()
    quarantined: bool = False
    stale: bool = False

    def to_bytes(self) -> bytes:
        d = {"v": self.version, "del": self.deleted, "owner": self.owner, "at": self.updated_at,
             "ed": list(self.editors), "rd": list(self.readers), "doc": self.document}
        if self.quarantined:  # only when set: a healthy view's bytes are those written before the flags existed
            d["q"] = True
        if self.stale:
            d["st"] = True
        return fastjson.dumps(d)

    @classmethod
    def from_bytes(cls, data: bytes) -> ObjectView:
        d = fastjson.loads(data)
        return cls(document=d["doc"], version=d["v"], deleted=d["del"], owner=d["owner"], updated_at=d["at"],
                   editors=tuple(d.get("ed", ())), readers=tuple(d.get("rd", ())), quarantined=d.get("q", False),
                   stale=d.get("st", False))
