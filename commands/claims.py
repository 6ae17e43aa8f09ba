"""Which object an idempotency key names: the first claim of (principal, key) in log order holds it for ``dedup_ttl``.

The validator deduplicates per object (``commands.decide``, ``state.recent``), and commands are partitioned by object
id, so it cannot see one principal's key used on two objects. The API therefore claims each client-chosen key on a
topic of its own, keyed by (principal, key), before it produces the command (``app.api.writes.claims``); every API
process folds that topic in offset order with ``settle`` and produces only the command whose object holds the key. The
fold is pure and reads no clock: every process that reads the same records agrees on every holder.

A holder expires ``dedup_ttl`` after its first claim (event time, as ``state.recent`` forgets a command id), measured
against the claim being settled; a claim of the same object while it holds keeps the first claim's time.

One principal holds at most ``max_keys`` keys at once: a claim that would take one more key while the principal's
other holders are ``max_keys`` unexpired ones (against the claim's time, ``live_keys``) takes none, and its command is
refused. The API keys every claim of one principal to one partition, so every process counts them in one order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from commands.command import Command
from commands.state import DEFAULT_LIMITS, Limits


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """One claim: ``principal``'s key names ``object_id`` from ``at_ms`` (ms since the epoch, the command's
    ``issued_at``)."""

    principal: str
    key: str
    object_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class Holder:
    """The object a key names, and when it was first claimed for it."""

    object_id: str
    at_ms: int


def claim_of(command: Command) -> KeyClaim:
    """Return the claim of ``command``'s command id (its Idempotency-Key) for its object."""
    return KeyClaim(command.principal, command.command_id, command.object_id,
                    int(command.issued_at.timestamp() * 1000))


def _ttl_ms(limits: Limits) -> int | None:
    ttl: timedelta | None = limits.dedup_ttl
    return None if ttl is None else int(ttl.total_seconds() * 1000)


def expired(holder: Holder, at_ms: int, limits: Limits = DEFAULT_LIMITS) -> bool:
    """Return True if ``holder`` no longer holds its key against a claim made at ``at_ms``."""
    ttl = _ttl_ms(limits)
    return ttl is not None and at_ms - holder.at_ms >= ttl


def live_keys(holders: Iterable[Holder], at_ms: int, limits: Limits = DEFAULT_LIMITS) -> int:
    """Return how many of one principal's ``holders`` still hold their key against a claim made at ``at_ms``."""
    return sum(1 for h in holders if not expired(h, at_ms, limits))


def settle(holder: Holder | None, claim: KeyClaim, limits: Limits = DEFAULT_LIMITS, *, live: int = 0,
           max_keys: int | None = None) -> Holder | None:
    """Return the holder of ``claim``'s key once ``claim`` is folded after ``holder`` (None: nobody holds it).

    The claim wins if nobody holds the key or the holder expired, unless the principal already holds ``max_keys``
    keys (``live``: ``live_keys`` of its holders at the claim's time): then nobody holds the key. A claim of the
    holder's own object keeps the holder (and its time); any other claim loses and changes nothing.
    """
    if holder is not None and not expired(holder, claim.at_ms, limits):
        return holder
    if max_keys is not None and live >= max_keys:
        return None
    return Holder(claim.object_id, claim.at_ms)


def won(holder: Holder | None, claim: KeyClaim) -> bool:
    """Return True if ``claim``'s command may be produced: its object holds the key (``holder`` is after ``settle``)."""
    return holder is not None and holder.object_id == claim.object_id
