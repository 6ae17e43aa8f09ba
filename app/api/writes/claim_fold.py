"""The fold of the Idempotency-Key claims topic: its records, and the holders every API process settles alike.

A claim record is keyed by its principal (so all of one principal's claims are on one partition, in one order)
and signed in its own domain (``app.signing.KEY_CLAIM_DOMAIN``): a record that is not a genuine claim counts for
nothing. ``ClaimFold`` settles each genuine claim with the pure ``commands.claims.settle`` and evicts expired
holders by the records' own event time, so what it answers is the pure fold's (``tests/unit/test_key_claims.py``)
while hosts' clocks agree within ``SLACK_MS``.
"""

from __future__ import annotations

import heapq
import json
import threading
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable

from app.signing import RecordSigner
from commands.claims import Holder, KeyClaim, settle
from commands.state import Limits

#: Holders are forgotten this long after they expired (and the fold starts this much earlier than ``dedup_ttl``
#: ago), so API hosts whose clocks differ by less than this still settle every claim alike.
SLACK_MS = 3600 * 1000


def claim_record(claim: KeyClaim) -> tuple[bytes, bytes]:
    """Return the key and value of ``claim``'s record: the key is the principal, so all of one principal's claims
    land on one partition, in one order (its count of keys, ``max_keys_per_principal``, is the same in every fold)."""
    key = claim.principal.encode()
    value = json.dumps({"principal": claim.principal, "key": claim.key, "object_id": claim.object_id,
                        "at_ms": claim.at_ms}, separators=(",", ":"), ensure_ascii=False).encode()
    return key, value


def read_claim(key: bytes | None, value: bytes | None) -> KeyClaim | None:
    """Return the claim in a record, or None for anything else (a record keyed other than by its principal too)."""
    if not value:
        return None
    try:
        d = json.loads(value)
        claim = KeyClaim(d["principal"], d["key"], d["object_id"], d["at_ms"])
    except (ValueError, TypeError, KeyError):
        return None
    ok = all(isinstance(v, str) for v in (claim.principal, claim.key, claim.object_id))
    return claim if ok and isinstance(claim.at_ms, int) and key == claim.principal.encode() else None


class _Partition:
    """One partition's holders: by principal and key, with each principal's holder times sorted (its live count)
    and a heap of every holder's time (eviction), all moved by this partition's records alone."""

    __slots__ = ("by_principal", "heap", "newest", "times")

    def __init__(self) -> None:
        self.by_principal: dict[str, dict[str, Holder]] = {}
        self.times: dict[str, list[int]] = {}  # principal -> its holders' at_ms, sorted
        self.heap: list[tuple[int, str, str]] = []  # (at_ms, principal, key) of every holder taken here
        self.newest = 0  # the largest at_ms folded on this partition: its event time


class ClaimFold:
    """The holders of the keys claimed so far, folded in each partition's offset order; thread-safe reads.

    Only records signed in the key claims' own domain count (``app.signing.KEY_CLAIM_DOMAIN``, whatever
    ``ARBITER_ALLOW_UNSIGNED_COMMANDS`` says): anything else is skipped, counted and logged. A holder is
    evicted once it expired against its partition's event time (the newest claim time folded there) less
    ``slack_ms``: by the records alone, never the wall clock, so every process evicts at the same records and
    memory holds one holder per key claimed within ``dedup_ttl`` + ``slack_ms`` of each partition's newest claim.
    """

    def __init__(self, limits: Limits, checker: RecordSigner | None, slack_ms: int = SLACK_MS,
                 max_keys: int | None = None, on_skip: Callable[[int, int, str], None] | None = None) -> None:
        self.limits = limits
        self.checker = checker  # None: nothing is checked (unit tests of the fold alone)
        self.slack_ms = slack_ms
        self.max_keys = max_keys
        self.on_skip = on_skip
        self.positions: dict[int, int] = {}  # partition -> next offset to fold
        self.skipped = 0  # records that are no genuine claim (unsigned, forged, malformed)
        self.holders = 0
        self._partitions: dict[int, _Partition] = {}
        self._where: dict[str, int] = {}  # principal -> the partition its claims were folded on
        self._ttl_ms = int(limits.dedup_ttl.total_seconds() * 1000) if limits.dedup_ttl is not None else None
        self._lock = threading.Lock()

    def add(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
            signature: bytes | None = None) -> None:
        """Fold the record at ``partition``/``offset`` (``signature``: its ``arbiter-signature`` header)."""
        problem = None if self.checker is None else self.checker.problem(key, value or b"", signature)
        claim = read_claim(key, value) if problem is None else None
        if claim is None and problem is None:
            problem = "not a claim record (JSON principal, key, object_id, at_ms, keyed by the principal)"
        with self._lock:
            if claim is not None:
                self._settle(partition, claim)
            else:
                self.skipped += 1
            self.positions[partition] = offset + 1
        if problem is not None and self.on_skip is not None:
            self.on_skip(partition, offset, problem)

    def _settle(self, partition: int, claim: KeyClaim) -> None:
        part = self._partitions.get(partition)
        if part is None:
            part = self._partitions[partition] = _Partition()
        self._where[claim.principal] = partition
        mine = part.by_principal.setdefault(claim.principal, {})
        times = part.times.setdefault(claim.principal, [])
        before = mine.get(claim.key)
        self._take(part, claim, mine, times, before)
        if not mine:  # it holds nothing here (its only key expired and this claim took none)
            self._forget(partition, part, claim.principal)
        if claim.at_ms > part.newest:
            part.newest = claim.at_ms
            self._evict(partition, part)

    def _take(self, part: _Partition, claim: KeyClaim, mine: dict[str, Holder], times: list[int],
              before: Holder | None) -> None:
        live = len(times) if self._ttl_ms is None else len(times) - bisect_right(times, claim.at_ms - self._ttl_ms)
        after = settle(before, claim, self.limits, live=live, max_keys=self.max_keys)
        if after is not before:
            if before is not None:
                del times[bisect_left(times, before.at_ms)]
                del mine[claim.key]
                self.holders -= 1
            if after is not None:
                insort(times, after.at_ms)
                mine[claim.key] = after
                heapq.heappush(part.heap, (after.at_ms, claim.principal, claim.key))
                self.holders += 1

    def _forget(self, partition: int, part: _Partition, principal: str) -> None:
        del part.by_principal[principal], part.times[principal]
        if self._where.get(principal) == partition:
            del self._where[principal]

    def _evict(self, partition: int, part: _Partition) -> None:
        if self._ttl_ms is None:
            return
        horizon = part.newest - self.slack_ms - self._ttl_ms  # a holder this old expired against every later claim
        while part.heap and part.heap[0][0] <= horizon:
            at_ms, principal, key = heapq.heappop(part.heap)
            mine = part.by_principal.get(principal)
            h = mine.get(key) if mine is not None else None
            if mine is None or h is None or h.at_ms != at_ms:
                continue  # replaced since (its new holder has its own entry)
            del mine[key]
            times = part.times[principal]
            del times[bisect_left(times, at_ms)]
            self.holders -= 1
            if not mine:
                self._forget(partition, part, principal)

    def figures(self) -> tuple[int, int, int, int]:
        """Return (records folded, summed over partitions; keys held; principals known; records skipped)."""
        with self._lock:
            return sum(self.positions.values()), self.holders, len(self._where), self.skipped

    def passed(self, partition: int, offset: int) -> bool:
        """Return True once the record at ``partition``/``offset`` is folded."""
        return self.positions.get(partition, -1) > offset

    def holder(self, principal: str, key: str) -> Holder | None:
        """Return the holder of ``principal``'s ``key``, if any."""
        with self._lock:
            part = self._partitions.get(self._where.get(principal, -1))
            mine = part.by_principal.get(principal) if part is not None else None
            return mine.get(key) if mine is not None else None

    def free_in_ms(self, principal: str, at_ms: int) -> int:
        """Return how long after ``at_ms`` the oldest of ``principal``'s live holders expires (0: none is live)."""
        with self._lock:
            part = self._partitions.get(self._where.get(principal, -1))
            times = part.times.get(principal) if part is not None else None
            if not times or self._ttl_ms is None:
                return 0
            i = bisect_right(times, at_ms - self._ttl_ms)
            return max(0, times[i] + self._ttl_ms - at_ms) if i < len(times) else 0
