"""Who may see and change an object: the one place the roles owner, editor and reader are defined.

- the **owner** (who created it) may do everything: update, delete, grant and revoke editors and readers;
- an **editor** may read and update;
- a **reader** may read.

Anyone else may not learn that the object exists: the validator answers them ``NOT_FOUND`` exactly as for an
unknown id, and the API's reads answer them the same ``404``.

An editor or reader may be a group, ``group:<name>``: every principal whose command (or token, for a read) names
``<name>`` among its groups holds that role. Ownership is never a group's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from commands.event import Event, EventType

GROUP_PREFIX = "group:"


def _holds(principal: str, groups: Collection[str], grantees: Collection[str]) -> bool:
    if principal in grantees:
        return True
    return any(GROUP_PREFIX + g in grantees for g in groups) if groups and grantees else False


def may_read(principal: str, owner: str, editors: Collection[str], readers: Collection[str],
             groups: Collection[str] = ()) -> bool:
    """Return True if ``principal`` (a member of ``groups``) may read the object (and so learn that it exists)."""
    return principal == owner or _holds(principal, groups, editors) or _holds(principal, groups, readers)


def may_update(principal: str, owner: str, editors: Collection[str], groups: Collection[str] = ()) -> bool:
    """Return True if ``principal`` (a member of ``groups``) may apply a merge patch to the object."""
    return principal == owner or _holds(principal, groups, editors)


def may_administer(principal: str, owner: str) -> bool:
    """Return True if ``principal`` may delete the object and grant or revoke its editors and readers."""
    return principal == owner


@dataclass(frozen=True, slots=True)
class Roles:
    """Who holds a role on an object after some event of it: what ``may_read`` needs, folded from its events."""

    owner: str
    editors: frozenset[str] = frozenset()
    readers: frozenset[str] = frozenset()
    deleted: bool = False
    version: int = 0

    def may_read(self, principal: str, groups: Collection[str] = ()) -> bool:
        """Return True if ``principal`` (a member of ``groups``) may read the object at this point of its history."""
        return may_read(principal, self.owner, self.editors, self.readers, groups)


def roles_after(before: Roles | None, event: Event) -> Roles:
    """Return the roles on ``event``'s object after it, from those before it (None before its creation).

    The same transitions ``decide`` makes: a grant adds its grantee, a revoke removes it, a delete keeps every role.
    """
    if before is None or event.type is EventType.CREATED:
        return Roles(event.owner, version=event.version)
    editors, readers = before.editors, before.readers
    if event.type is EventType.EDITOR_GRANTED and event.editor is not None:
        editors = editors | {event.editor}
    elif event.type is EventType.EDITOR_REVOKED and event.editor is not None:
        editors = editors - {event.editor}
    elif event.type is EventType.READER_GRANTED and event.reader is not None:
        readers = readers | {event.reader}
    elif event.type is EventType.READER_REVOKED and event.reader is not None:
        readers = readers - {event.reader}
    return Roles(event.owner, editors, readers, before.deleted or event.type is EventType.DELETED, event.version)
