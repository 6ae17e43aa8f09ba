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


class StoredView:
    """A stored view whose document is decoded only when ``document`` is read (issue 25).

    The roles, version and deletion come from the bytes around the document, so a caller that checks access first
    (``commands.access.may_read``) never pays for decoding a document it will not serve: an outsider's 404 costs
    the same whatever the document's size. ``decodes`` counts document decodes (tests hold it at zero for them).
    """

    __slots__ = ("_document", "_text", "deleted", "editors", "owner", "quarantined", "readers", "stale", "updated_at",
                 "version")
    decodes = 0

    def __init__(self, text: bytes | str, version: int, deleted: bool, owner: str, updated_at: str | None,
                 editors: tuple[str, ...], readers: tuple[str, ...], quarantined: bool = False,
                 stale: bool = False) -> None:
        self._text: bytes | str | None = text
        self._document: dict[str, Any] | None = None
        self.version, self.deleted, self.owner, self.updated_at = version, deleted, owner, updated_at
        self.editors, self.readers, self.quarantined, self.stale = editors, readers, quarantined, stale

    @property
    def document(self) -> dict[str, Any]:
        if self._document is None:
            StoredView.decodes += 1
            self._document = fastjson.loads(self._text or b"{}")
            self._text = None
        return self._document

    def view(self) -> ObjectView:
        """Return the eager ``ObjectView`` of the same object."""
        return ObjectView(self.document, self.version, self.deleted, self.owner, self.updated_at, self.editors,
                          self.readers, self.quarantined, self.stale)

    @classmethod
    def from_bytes(cls, data: bytes) -> StoredView:
        """Split ``ObjectView.to_bytes``' canonical JSON around its document without decoding the document.

        Keys are sorted (``at, del, doc, ed, owner, q, rd, st, v``; ``q`` and ``st`` only when set). Inside a JSON
        string a quote is always escaped, so ``,"doc":`` first occurs as the key, and ``,"ed":[`` last occurs as the
        key after the document. Anything else (views stored before roles were kept, another layout) is decoded whole,
        as before.
        """
        start, end = data.find(b',"doc":'), data.rfind(b',"ed":[')
        if 0 < start < end:
            try:
                head, tail = fastjson.loads(data[:start] + b"}"), fastjson.loads(b"{" + data[end + 1:])
            except ValueError:
                head = tail = None
            if type(head) is dict and type(tail) is dict and head.keys() == _HEAD and _TAIL <= tail.keys() <= _FLAGGED:
                return cls(data[start + 7:end], tail["v"], head["del"], tail["owner"], head["at"], tuple(tail["ed"]),
                           tuple(tail["rd"]), tail.get("q", False), tail.get("st", False))
        v = ObjectView.from_bytes(data)
        whole = cls(b"", v.version, v.deleted, v.owner, v.updated_at, v.editors, v.readers, v.quarantined, v.stale)
        whole._document, whole._text = v.document, None
        return whole


_HEAD = {"at", "del"}
_TAIL = {"ed", "owner", "rd", "v"}
_FLAGGED = _TAIL | {"q", "st"}
