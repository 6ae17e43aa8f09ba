"""List cursors bound by a MAC to the caller they were handed to: any other cursor is ``400 INVALID_CURSOR``.

A cursor is ``projections.db.lists.encode_cursor``'s keyset position, a dot, and 22 base64url characters of
HMAC-SHA256 (128 bits) over a domain tag, the caller's principal and that position, under a key derived from
``ARBITER_AUTH_SECRET``. Why a MAC rather than strict decoding alone: strict decoding (done as well) keeps a
crafted position inside what both read models can store, but only a MAC makes "a cursor this API did not hand out"
decidable, and it keeps one caller's position from being replayed as another's. Every API worker derives the same
key, so a cursor from one serves on the next; a new ``ARBITER_AUTH_SECRET`` ends the cursors handed out before it
(their callers start the list again).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from functools import lru_cache

from app.settings import Settings
from projections.db.lists import BadCursor, ListItem, decode_cursor, encode_cursor

_DOMAIN = b"arbiter-list-cursor-v1\x00"
_MAC_BYTES = 16


class CursorSigner:
    """Hand out and open the list cursors of one key."""

    def __init__(self, key: bytes) -> None:
        self._keyed = hmac.new(key, _DOMAIN, hashlib.sha256)

    def _mac(self, principal: str, position: str) -> str:
        h = self._keyed.copy()
        p = principal.encode("utf-8", "surrogatepass")
        h.update(len(p).to_bytes(4, "big") + p + position.encode("ascii"))
        return base64.urlsafe_b64encode(h.digest()[:_MAC_BYTES]).decode().rstrip("=")

    def sign(self, principal: str, item: ListItem) -> str:
        """Return the cursor after ``item`` for ``principal``."""
        position = encode_cursor(item)
        return f"{position}.{self._mac(principal, position)}"

    def open(self, principal: str, cursor: str) -> tuple[int, str]:
        """Return ``(updated_us, id)`` of a cursor handed to ``principal``; raise ``BadCursor`` for anything else."""
        position, dot, mac = cursor.rpartition(".")
        if not dot or not position.isascii() or not hmac.compare_digest(
                mac.encode("ascii", "replace"), self._mac(principal, position).encode("ascii")):
            raise BadCursor(f"cursor {cursor[:40]!r} was not handed out by this API (to this caller)")
        return decode_cursor(position)


def cursor_signer(settings: Settings) -> CursorSigner:
    """Return the cursor signer of ``settings``' ``ARBITER_AUTH_SECRET`` (cached per secret)."""
    return _signer(settings.auth_secret.get_secret_value())


@lru_cache(maxsize=8)
def _signer(secret: str) -> CursorSigner:
    return CursorSigner(hmac.new(secret.encode("utf-8"), b"arbiter list cursor key v1", hashlib.sha256).digest())
