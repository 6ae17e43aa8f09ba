"""The rescale's pure core: every entry of the old shards lands exactly once, in the shard murmur2 routes its id to."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.rescale.errors import HoldsInFlight, RulesDiverged, UnknownShardKey
from app.rescale.split import M_HOLDS, M_RULES, M_SEEDED, merged_rules, split
from app.validator.murmur2 import partition_for
from app.validator.rules import ShardRules, decode_shard_rules, encode_shard_rules

pytestmark = pytest.mark.unit

ids = st.binary(min_size=1, max_size=12)
BOOKKEEPING = {b"m:batch": struct.pack(">q", 7), b"m:range": b"x" * 16, b"m:lineage": b"abc"}


@st.composite
def shard_sets(draw: st.DrawFn) -> tuple[int, dict[int, dict[bytes, bytes]]]:
    """Old shards as the validator leaves them: each id in the shard murmur2 routes it to, some with tombstones."""
    old = draw(st.integers(1, 9))
    shards: dict[int, dict[bytes, bytes]] = {p: dict(BOOKKEEPING) for p in range(old)}
    for oid in draw(st.sets(ids, max_size=40)):
        entries = shards[partition_for(oid, old)]
        entries[b"s:" + oid] = draw(st.binary(min_size=8, max_size=20))
        if draw(st.booleans()):
            entries[b"t:" + struct.pack(">q", draw(st.integers(0, 2**40))) + oid] = b""
    return old, shards


def _objects(shards: dict[int, dict[bytes, bytes]]) -> dict[bytes, bytes]:
    return {k: v for e in shards.values() for k, v in e.items() if not k.startswith(b"m:")}


@given(shard_sets(), st.integers(1, 13))
def test_every_entry_lands_exactly_once_where_its_id_routes(old: tuple[int, dict[int, dict[bytes, bytes]]],
                                                             n: int) -> None:
    _, shards = old
    new = split(shards, n)
    assert sorted(new) == list(range(n))
    landed = [k for e in new.values() for k in e if not k.startswith(b"m:")]
    assert len(landed) == len(set(landed)) == len(_objects(shards))
    assert _objects(new) == _objects(shards)  # bytes unchanged: write time, dedup window and state travel whole
    for p, entries in new.items():
        for key in entries:
            if key.startswith(b"s:"):
                assert partition_for(key[2:], n) == p
            elif key.startswith(b"t:"):
                assert partition_for(key[10:], n) == p
        assert entries[M_SEEDED] == b"1"
        assert b"m:batch" not in entries and b"m:lineage" not in entries  # the old checkpoint's bookkeeping


def test_routing_across_hash_chunks_keeps_every_entry_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    import app.rescale.split as split_module

    entries = [(b"s:" + f"obj-{i}".encode(), bytes([i])) for i in range(50) if partition_for(f"obj-{i}".encode(), 2) == 0]
    entries.insert(7, (b"m:batch", b"x"))  # bookkeeping inside a chunk is skipped, not routed
    monkeypatch.setattr(split_module, "ROUTE_CHUNK", 4)
    routed = list(split_module.route(entries, 0, 2, 5))
    assert [(k, v) for _, k, v in routed] == [e for e in entries if e[0] != b"m:batch"]
    assert all(p == partition_for(k[2:], 5) for p, k, _ in routed)


@given(shard_sets(), st.integers(1, 13), st.integers(1, 13))
def test_split_then_merge_round_trips(old: tuple[int, dict[int, dict[bytes, bytes]]], n: int, m: int) -> None:
    count, shards = old
    there = split(shards, n)
    back = split(split(there, m), count)
    for p in range(count):
        assert {k: v for k, v in back[p].items() if not k.startswith(b"m:")} == \
            {k: v for k, v in shards[p].items() if not k.startswith(b"m:")}


@given(st.dictionaries(st.integers(1, 5), st.text(max_size=5), min_size=1), st.integers(2, 6), st.integers(1, 7))
def test_every_new_shard_gets_the_union_of_versions_and_the_one_in_force(docs: dict[int, str], old: int,
                                                                          n: int) -> None:
    active = max(docs)
    shards = {p: {M_RULES: encode_shard_rules(ShardRules({v: d for v, d in docs.items() if v == active or v % old == p},
                                                         active))} for p in range(old)}
    for entries in split(shards, n).values():
        assert decode_shard_rules(entries[M_RULES]) == ShardRules(docs, active)


def test_shards_on_different_versions_are_refused() -> None:
    a = {M_RULES: encode_shard_rules(ShardRules({1: "x"}, 1))}
    b = {M_RULES: encode_shard_rules(ShardRules({1: "x", 2: "y"}, 2))}
    with pytest.raises(RulesDiverged, match=r"versions \[1, 2\]"):
        split({0: a, 1: b}, 3)
    with pytest.raises(RulesDiverged, match="half way"):
        merged_rules([a, {}])  # a shard with no rules beside one with: also a deploy half way
    with pytest.raises(RulesDiverged, match="different documents"):
        merged_rules([a, {M_RULES: encode_shard_rules(ShardRules({1: "z"}, 1))}])


def test_a_shard_holding_objects_for_a_decision_in_flight_is_refused() -> None:
    """Holds are the old checkpoint's bookkeeping, not split: a rescale waits until no conversation is in flight."""
    held = {M_HOLDS: b'{"user-1":{}}', b"s:user-1": b"x" * 9}
    with pytest.raises(HoldsInFlight, match=r"shards \[1\] hold 1 objects"):
        split({0: {M_HOLDS: b"{}"}, 1: held}, 3)
    assert split({0: {M_HOLDS: b"{}"}, 1: {}}, 2)  # holds that all ended: nothing to wait for


def test_no_rules_anywhere_gives_new_shards_without_rules() -> None:
    assert all(M_RULES not in e for e in split({0: {b"s:a": b"12345678"}}, 2).values())


def test_an_unknown_key_or_one_object_in_two_shards_is_refused() -> None:
    with pytest.raises(UnknownShardKey, match="neither state"):
        split({0: {b"x:odd": b""}}, 2)
    with pytest.raises(UnknownShardKey, match="whose id routes to shard"):  # so it could be in two shards
        split({0: {b"s:a": b"1"}, 1: {b"s:a": b"2"}}, 2)
