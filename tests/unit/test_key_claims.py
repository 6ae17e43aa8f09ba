"""Idempotency-Key claims (commands.claims, app.api.writes.claims): the first claim of a key in log order names its one
object for dedup_ttl, every fold of the same records agrees, and the API's pruning fold settles as the pure one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.writes.claims import SLACK_MS, ClaimFold, claim_record, read_claim
from commands.claims import Holder, KeyClaim, settle, won
from commands.state import Limits

pytestmark = pytest.mark.unit

TTL_MS = 10_000
LIMITS = Limits(dedup_ttl=timedelta(milliseconds=TTL_MS))

claims = st.lists(st.builds(KeyClaim, st.sampled_from(["alice", "bob"]), st.sampled_from(["k1", "k2"]),
                            st.sampled_from(["o1", "o2", "o3"]), st.integers(0, 3 * TTL_MS)), max_size=40)


def fold(cs: list[KeyClaim]) -> list[tuple[KeyClaim, bool]]:
    """Settle ``cs`` in order; return each claim and whether its command may be produced."""
    holders: dict[tuple[str, str], Holder] = {}
    out = []
    for c in cs:
        h = holders[(c.principal, c.key)] = settle(holders.get((c.principal, c.key)), c, LIMITS)
        out.append((c, won(h, c)))
    return out


def test_the_first_claim_wins_and_another_object_loses_until_the_ttl() -> None:
    first = KeyClaim("alice", "k", "o1", 1000)
    assert fold([first]) == [(first, True)]
    same, other = KeyClaim("alice", "k", "o1", 2000), KeyClaim("alice", "k", "o2", 1000 + TTL_MS - 1)
    assert [w for _, w in fold([first, other, same])] == [True, False, True]
    later = KeyClaim("alice", "k", "o2", 1000 + TTL_MS)  # the first claim expired: the key is free again
    assert [w for _, w in fold([first, later, KeyClaim("alice", "k", "o1", 1000 + TTL_MS)])] == [True, True, False]
    theirs = KeyClaim("bob", "k", "o2", 1500)  # another principal's same key is another key
    assert [w for _, w in fold([first, theirs])] == [True, True]


@given(claims)
def test_within_a_ttl_of_the_first_claim_one_object_wins(cs: list[KeyClaim]) -> None:
    decided = fold(sorted(cs, key=lambda c: c.at_ms))  # claims in the log in the order of their times
    for principal, key in {(c.principal, c.key) for c in cs}:
        mine = [(c, w) for c, w in decided if (c.principal, c.key) == (principal, key)]
        first = mine[0][0]
        assert mine[0][1]  # the first claim of a key always wins
        window = [(c, w) for c, w in mine if c.at_ms - first.at_ms < TTL_MS]
        assert {c.object_id for c, w in window if w} == {first.object_id}
        assert all(w == (c.object_id == first.object_id) for c, w in window)


@given(claims)
@settings(max_examples=200)
def test_the_apis_fold_settles_every_claim_as_the_pure_fold(cs: list[KeyClaim]) -> None:
    # The API's fold reads one partition per key group and prunes expired holders; its answers are the pure fold's.
    f = ClaimFold(LIMITS)
    for offset, (c, expected) in enumerate(fold(cs)):
        f.add(0, offset, claim_record(c)[1])
        assert f.passed(0, offset) and not f.passed(0, offset + 1)
        h = f.holder(c.principal, c.key)
        assert h is not None and won(h, c) == expected


@given(st.lists(st.builds(KeyClaim, st.just("alice"), st.sampled_from(["k1", "k2"]), st.sampled_from(["o1", "o2"]),
                          st.just(0)), min_size=30, max_size=60),
       st.lists(st.integers(0, TTL_MS // 4), min_size=60, max_size=60))
@settings(max_examples=300)
def test_pruning_changes_no_answer_while_clocks_agree_within_the_slack(cs: list[KeyClaim], jitter: list[int]) -> None:
    # claims a few TTLs apart, each up to a quarter TTL off (API hosts' clocks): pruning with half a TTL of slack
    # forgets only holders no later claim could still meet
    cs = [KeyClaim(c.principal, c.key, c.object_id, i * TTL_MS // 8 + j)
          for i, (c, j) in enumerate(zip(sorted(cs, key=lambda c: c.at_ms), jitter, strict=False))]
    f = ClaimFold(LIMITS, slack_ms=TTL_MS // 2)
    for offset, (c, expected) in enumerate(fold(cs)):
        f.add(0, offset, claim_record(c)[1])
        h = f.holder(c.principal, c.key)
        assert h is not None and won(h, c) == expected


def test_the_fold_prunes_only_long_expired_holders_and_skips_junk() -> None:
    f = ClaimFold(LIMITS)
    f.add(3, 0, claim_record(KeyClaim("alice", "old", "o1", 0))[1])
    f.add(3, 1, b"not a claim")
    f.add(3, 2, b'{"principal": "a", "key": "k", "object_id": 7, "at_ms": 1}')
    assert f.skipped == 2 and f.passed(3, 2) and not f.passed(2, 0)
    f.add(3, 3, claim_record(KeyClaim("alice", "new", "o1", TTL_MS + SLACK_MS + 1))[1])
    assert f.holder("alice", "old") is None and f.holder("alice", "new") == Holder("o1", TTL_MS + SLACK_MS + 1)


def test_a_claim_record_reads_back_as_itself() -> None:
    c = KeyClaim("al\u00e9", "k:\u2603", "o/1", 1_700_000_000_123)
    key, value = claim_record(c)
    assert key == "al\u00e9\x00k:\u2603".encode() and read_claim(value) == c
