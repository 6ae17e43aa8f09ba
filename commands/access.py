"""Who may see and change an object: the one place the roles owner, editor and reader are defined.

- the **owner** (who created it) may do everything: update, delete, grant and revoke editors and readers;
- an **editor** may read and update;
- a **reader** may read.

Anyone else may not learn that the object exists: the validator answers them ``NOT_FOUND`` exactly as for an
unknown id, and the API's reads answer them the same ``404``.
"""

from __future__ import annotations

from collections.abc import Collection


def may_read(principal: str, owner: str, editors: Collection[str], readers: Collection[str]) -> bool:
    """Return True if ``principal`` may read the object (and so learn that it exists)."""
    return principal == owner or principal in editors or principal in readers


def may_update(principal: str, owner: str, editors: Collection[str]) -> bool:
    """Return True if ``principal`` may apply a merge patch to the object."""
    return principal == owner or principal in editors


def may_administer(principal: str, owner: str) -> bool:
    """Return True if ``principal`` may delete the object and grant or revoke its editors and readers."""
    return principal == owner
