"""Idempotency-Key claims (commands.claims, app.api.writes.claim_fold): the first claim of a key in log order names its
one object for dedup_ttl, a principal holds at most max_keys keys, every fold of the same records agrees, the API's
evicting fold settles as the pure one, and only claims signed in their own domain count."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.writes.claim_fold import SLACK_MS, ClaimFold, claim_record, read_claim
from app.signing import (
    CLAIM_DOMAIN,
    COMMAND_DOMAIN,
    CONTROL_DOMAIN,
    DOMAINS,
    KEY_CLAIM_DOMAIN,
    SIGNATURE_HEADER,
    RecordSigner,
    signature_of,
)
from commands.claims import Holder, KeyClaim, live_keys, settle, won
from commands.state import Limits

pytestmark = pytest.mark.unit

TTL_MS = 10_000
LIMITS = Limits(dedup_ttl=timedelta(milliseconds=TTL_MS))
KEYS = {"k1": b"a-record-key-of-32-bytes-or-more!", "k2": b"another-record-key-of-32-bytes-or"}
SIGNER = RecordSigner(KEYS, "k1", KEY_CLAIM_DOMAIN)


def signed(c: KeyClaim, signer: RecordSigner = SIGNER) -> tuple[bytes, bytes, bytes]:
    """Return ``c``'s record (key, value) and its signature header, as the API produces it."""
    key, value = claim_record(c)
    return key, value, signature_of(signer.headers(key, value)) or b""


def genuine_fold(**kw: object) -> ClaimFold:
    """Return a fold that checks claims as the API's does (the key claims' domain, the same keys)."""
    return ClaimFold(LIMITS, RecordSigner(KEYS, "k2", KEY_CLAIM_DOMAIN), **kw)  # type: ignore[arg-type]

claims = st.lists(st.builds(KeyClaim, st.sampled_from(["alice", "bob"]), st.sampled_from(["k1", "k2"]),
                            st.sampled_from(["o1", "o2", "o3"]), st.integers(0, 3 * TTL_MS)), max_size=40)


def fold(cs: list[KeyClaim], max_keys: int | None = None) -> list[tuple[KeyClaim, bool]]:
    """Settle ``cs`` in order (the pure specification, nothing evicted); return each claim and whether its command
    may be produced."""
    holders: dict[tuple[str, str], Holder] = {}
    out = []
    for c in cs:
        live = live_keys([h for (p, _), h in holders.items() if p == c.principal], c.at_ms, LIMITS)
        h = settle(holders.get((c.principal, c.key)), c, LIMITS, live=live, max_keys=max_keys)
        if h is None:
            holders.pop((c.principal, c.key), None)
        else:
            holders[(c.principal, c.key)] = h
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


@given(claims, st.sampled_from([None, 1, 2, 3]))
@settings(max_examples=200)
def test_the_apis_fold_settles_every_claim_as_the_pure_fold(cs: list[KeyClaim], max_keys: int | None) -> None:
    # The API's fold reads one partition per principal, checks signatures and evicts expired holders; its answers
    # are the pure fold's, with and without a bound on keys per principal.
    f = genuine_fold(max_keys=max_keys)
    for offset, (c, expected) in enumerate(fold(cs, max_keys)):
        f.add(0, offset, *signed(c))
        assert f.passed(0, offset) and not f.passed(0, offset + 1)
        assert won(f.holder(c.principal, c.key), c) == expected
    assert f.skipped == 0


@given(st.lists(st.builds(KeyClaim, st.just("alice"), st.sampled_from(["k1", "k2"]), st.sampled_from(["o1", "o2"]),
                          st.just(0)), min_size=30, max_size=60),
       st.lists(st.integers(0, TTL_MS // 4), min_size=60, max_size=60))
@settings(max_examples=300)
def test_pruning_changes_no_answer_while_clocks_agree_within_the_slack(cs: list[KeyClaim], jitter: list[int]) -> None:
    # claims a few TTLs apart, each up to a quarter TTL off (API hosts' clocks): pruning with half a TTL of slack
    # forgets only holders no later claim could still meet
    cs = [KeyClaim(c.principal, c.key, c.object_id, i * TTL_MS // 8 + j)
          for i, (c, j) in enumerate(zip(sorted(cs, key=lambda c: c.at_ms), jitter, strict=False))]
    f = genuine_fold(slack_ms=TTL_MS // 2, max_keys=1)
    for offset, (c, expected) in enumerate(fold(cs, max_keys=1)):
        f.add(0, offset, *signed(c))
        assert won(f.holder(c.principal, c.key), c) == expected


def test_the_fold_evicts_only_long_expired_holders_and_skips_junk() -> None:
    skips: list[tuple[int, int, str]] = []
    f = genuine_fold(on_skip=lambda *a: skips.append(a))
    f.add(3, 0, *signed(KeyClaim("alice", "old", "o1", 0)))
    f.add(3, 1, b"alice", b"not a claim", signed(KeyClaim("alice", "x", "o1", 0))[2])
    value = b'{"principal": "a", "key": "k", "object_id": 7, "at_ms": 1}'
    f.add(3, 2, b"a", value, signature_of(SIGNER.headers(b"a", value)))  # signed, but no claim
    assert f.skipped == 2 and [s[:2] for s in skips] == [(3, 1), (3, 2)] and f.passed(3, 2) and not f.passed(2, 0)
    f.add(3, 3, *signed(KeyClaim("alice", "new", "o1", TTL_MS + SLACK_MS - 1)))  # "old" expired, not by the slack
    assert f.holder("alice", "old") == Holder("o1", 0) and f.holders == 2
    f.add(3, 4, *signed(KeyClaim("alice", "new", "o1", TTL_MS + SLACK_MS)))
    assert f.holder("alice", "old") is None and f.holder("alice", "new") == Holder("o1", TTL_MS + SLACK_MS - 1)
    assert f.holders == 1


def test_memory_holds_only_the_keys_claimed_within_the_ttl_and_slack_of_the_newest_claim() -> None:
    # 8,000 keys of 50 principals (each on partition p % 4, as claims are keyed) claimed 10 ms apart over 8 TTLs:
    # the fold holds the last ~(TTL + slack) of them, evicted by the claims' own times (no clock)
    f = genuine_fold(slack_ms=TTL_MS // 2)
    window = (TTL_MS + TTL_MS // 2) // 10  # claims within TTL + slack of the newest: 1,500
    offsets = [0, 0, 0, 0]
    for i in range(8_000):
        p = i % 50
        f.add(p % 4, offsets[p % 4], *signed(KeyClaim(f"p{p}", f"k{i}", "o", i * 10)))
        offsets[p % 4] += 1
        if i % 997 == 0:  # a partition's newest claim is at most one round of 50 (500 ms) behind the newest of all
            assert min(i + 1, window) <= f.holders <= window + 50, (i, f.holders)
    assert f.holder("p0", "k0") is None and f.holder("p49", "k7999") == Holder("o", 79_990)
    assert f.figures() == (8_000, f.holders, 50, 0)
    f.add(0, offsets[0], *signed(KeyClaim("p0", "late", "o", 10**9)))  # far later: partition 0's holders expire
    assert f.figures()[1:3] == (f.holders, 50 - 13 + 1) and f.holder("p4", "k7954") is None  # 13 principals on 0
    assert f.holder("p1", "k7951") == Holder("o", 79_510)  # partition 1 evicts by its own claims only


def test_a_principal_holds_at_most_max_keys_keys() -> None:
    # the boundary: the max_keys-th key is taken, one more is refused (no holder), until the oldest expires
    f = genuine_fold(max_keys=3)
    for i, key in enumerate(["a", "b", "c"]):
        f.add(0, i, *signed(KeyClaim("alice", key, "o1", 1000 + i)))
        assert f.holder("alice", key) == Holder("o1", 1000 + i)
    f.add(0, 3, *signed(KeyClaim("alice", "d", "o1", 2000)))
    assert f.holder("alice", "d") is None and f.free_in_ms("alice", 2000) == 1000 + TTL_MS - 2000
    f.add(0, 4, *signed(KeyClaim("alice", "a", "o1", 2001)))  # a retry of a held key takes no new key: still won
    assert won(f.holder("alice", "a"), KeyClaim("alice", "a", "o1", 2001))
    f.add(0, 5, *signed(KeyClaim("bob", "d", "o1", 2002)))  # another principal's keys are its own
    assert f.holder("bob", "d") == Holder("o1", 2002)
    f.add(0, 6, *signed(KeyClaim("alice", "d", "o2", 1000 + TTL_MS)))  # "a" expired: one key is free again
    assert f.holder("alice", "d") == Holder("o2", 1000 + TTL_MS) and f.holder("alice", "a") == Holder("o1", 1000)
    assert f.free_in_ms("alice", 1000 + TTL_MS) == 1


def test_only_claims_signed_in_their_own_domain_count() -> None:
    # A forged claim (unsigned, another key's, another kind's genuine signature) takes no key, and the genuine claim
    # after it wins; every one is counted and reported
    skips: list[tuple[int, int, str]] = []
    f = genuine_fold(on_skip=lambda *a: skips.append(a))
    theft = KeyClaim("alice", "k", "mallory-object", 1000)
    key, value, _ = signed(theft)
    intruder = RecordSigner({"k1": b"not-arbiter-s-key-but-long-enough!"}, "k1", KEY_CLAIM_DOMAIN)
    others = [RecordSigner(KEYS, "k1", d) for d in DOMAINS if d != KEY_CLAIM_DOMAIN]
    forgeries = [None, b"k1:" + b"A" * 43, b"nokid", signed(theft, intruder)[2],
                 *(signature_of(o.headers(key, value)) for o in others)]
    for offset, sig in enumerate(forgeries):
        f.add(0, offset, key, value, sig)
    assert f.holder("alice", "k") is None and f.holders == 0
    assert f.skipped == len(forgeries) == len(skips) and all(why for *_, why in skips)
    mine = KeyClaim("alice", "k", "alice-object", 1001)
    f.add(0, len(forgeries), *signed(mine))
    assert f.holder("alice", "k") == Holder("alice-object", 1001) and f.skipped == len(forgeries)
    # a tampered genuine claim (its object changed after signing) is no claim either
    k2, v2, sig2 = signed(KeyClaim("alice", "k3", "o1", 1002))
    f.add(0, len(forgeries) + 1, k2, v2.replace(b'"o1"', b'"o9"'), sig2)
    assert f.holder("alice", "k3") is None and f.skipped == len(forgeries) + 1


def test_a_key_claims_signature_is_no_other_kinds_and_no_other_kinds_is_a_key_claims() -> None:
    key, value, sig = signed(KeyClaim("alice", "k", "o1", 1))
    for domain in (COMMAND_DOMAIN, CONTROL_DOMAIN, CLAIM_DOMAIN):
        other = RecordSigner(KEYS, "k1", domain)
        assert other.problem(key, value, sig) is not None  # a claim record is no command, control record, ...
        assert SIGNER.problem(key, value, signature_of(other.headers(key, value))) is not None  # ... nor the reverse
    assert SIGNER.problem(key, value, sig) is None
    assert SIGNER.headers(key, value)[0][0] == SIGNATURE_HEADER


def test_a_claim_record_reads_back_as_itself_keyed_by_its_principal() -> None:
    c = KeyClaim("al\u00e9", "k:\u2603", "o/1", 1_700_000_000_123)
    key, value = claim_record(c)
    assert key == "al\u00e9".encode() and read_claim(key, value) == c
    assert read_claim(b"bob", value) is None and read_claim(key, None) is None  # keyed by another principal: no claim


def test_the_claims_topic_keeps_claims_longer_than_the_fold_reads_back() -> None:
    from app.api.writes.claims import claims_retention_ms
    from app.settings import Settings

    assert claims_retention_ms(Settings()) == Settings().retention_ms  # 7 days, above 24 h + 2 h
    short = Settings(retention_ms=3600_000, dedup_ttl_ms=24 * 3600_000)
    assert claims_retention_ms(short) == 24 * 3600_000 + 2 * SLACK_MS


def test_a_keyed_write_is_503_never_accepted_while_the_claims_reader_has_not_caught_up() -> None:
    # No broker answers: the reader never catches up, so a keyed write is refused 503 with Retry-After once
    # produce_timeout_s passed (nothing appended, nothing produced), and the reader's status says why.
    import asyncio
    import socket

    from app.api.problems import ApiError
    from app.api.writes.claims import KeyClaims
    from app.api.writes.submit import now
    from app.settings import Settings
    from commands import UpdateObject

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = Settings(kafka_bootstrap=f"127.0.0.1:{port}", produce_timeout_s=0.5, retry_after_s=2)
    claims = KeyClaims(s)
    try:
        cmd = UpdateObject("k", "o", "alice", now(), patch="{}")
        with pytest.raises(ApiError) as refused:
            asyncio.run(claims.check(cmd))
        assert refused.value.code == "BROKER_UNAVAILABLE" and refused.value.headers == {"Retry-After": "2"}
        assert "caught up" in refused.value.message
        status = claims.status()
        assert status["ready"] is False and status["lag"] is None and status["holders"] == 0, status
    finally:
        claims.close()
