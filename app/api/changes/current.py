"""Who may read an object *now*, as ``GET /objects/{id}/events`` answers it: a resumed stream's catch-up replays
the past only to a caller who could read that history through the API right now.

The answer comes from the read model's current view (its owner, editors and readers, the caller's groups as its
token has them now; a deleted object whose history was erased is read by nobody). The read model trails the
events topic: for an event newer than the view, the view does not know yet who may read after it, and the
caller's stream decides by the roles folded up to that event, as the live feed does.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from starlette.concurrency import run_in_threadpool

from commands.access import may_read


class CurrentAccess:
    """The current readability of the objects one stream meets, looked up once per object (and again once an
    event newer than the view comes), at most ``max_objects`` kept (least recently met dropped first)."""

    def __init__(self, read_model: Any, principal: str, groups: tuple[str, ...],  # noqa: ANN401 - a read model
                 max_objects: int = 100_000) -> None:
        self.read_model = read_model
        self.principal, self.groups = principal, groups
        self.max_objects = max_objects
        self._known: OrderedDict[str, tuple[int, bool]] = OrderedDict()  # object -> (view's version, readable)

    def _look(self, object_id: str) -> tuple[int, bool]:
        rm = self.read_model
        view = getattr(rm, "lookup", rm.get)(object_id)
        if view is None:
            return 0, False
        readable = may_read(self.principal, view.owner, view.editors, view.readers, self.groups)
        history = getattr(rm, "history", None)
        if readable and view.deleted and history is not None and not history(object_id, view.version - 1, 1):
            readable = False  # erased (arbiter erase): its history is 410 to everyone
        return view.version, readable

    async def learn(self, wanted: Iterable[tuple[str, int]]) -> None:
        """Look up the objects of ``wanted`` (object id, version of an event met) not known at that version: on
        the loop for the embedded read model (microseconds), on a worker thread for a network one."""
        ids = {oid for oid, version in wanted if self._known.get(oid, (-1, False))[0] < version}
        if not ids:
            return
        if getattr(self.read_model, "blocking", False):
            found = await run_in_threadpool(lambda: {oid: self._look(oid) for oid in ids})
        else:
            found = {oid: self._look(oid) for oid in ids}
        for oid, answer in found.items():
            self._known[oid] = answer
            self._known.move_to_end(oid)
        while len(self._known) > self.max_objects:
            self._known.popitem(last=False)

    def readable(self, object_id: str, version: int) -> bool | None:
        """Return whether the caller may read ``object_id`` now; None if the view is older than ``version``
        (or was not learnt): the read model does not know yet."""
        known = self._known.get(object_id)
        if known is None or known[0] < version:
            return None
        return known[1]
