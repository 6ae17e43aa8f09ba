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
