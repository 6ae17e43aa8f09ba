"""The pure core of a rescale: route every entry of the old shards to one of N new shards by murmur2(object id).

A shard database (``app.validator.rocks.shard``) holds ``s:<id>`` (the object's state, its dedup window inside,
behind its 8-byte write time), ``t:<expiry><id>`` (the tombstone index) and ``m:*`` bookkeeping. A state and its
tombstone entry go, bytes unchanged, to ``partition_for(id, N)``: the shard the new commands topic routes the
id's commands to, so the write time (and with it the TTLs) and the dedup window travel with the object. Of the
bookkeeping only ``m:rules`` carries over: every new shard gets the union of the versions the old shards have
seen, and the version in force, which must be the same on every old shard (a deploy writes a control record
to every partition; after a drain they agree unless a deploy is half way, refused as ``RESCALE_RULES_DIVERGED``).
The rest (batch id, offsets, outputs of the last batch, lineage) belongs to the old checkpoint and is dropped, but
a shard that still holds objects for a decision spanning objects (``m:holds``, ``app.validator.multi``) is refused
(``RESCALE_HOLDS_IN_FLIGHT``): its conversation has records to come. Any other key is refused
(``RESCALE_UNKNOWN_KEY``): nothing is silently lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice

import numpy as np

from app.rescale.errors import HoldsInFlight, RulesDiverged, UnknownShardKey
from app.validator.murmur2 import partition_for, positive_hashes
from app.validator.rules import NO_RULES, ShardRules, decode_shard_rules, encode_shard_rules

STATE = b"s:"
TOMB = b"t:"
META = b"m:"
M_RULES = b"m:rules"
M_HOLDS = b"m:holds"  # objects waiting for decisions that span objects (``app.validator.rocks.shard``)
M_SEEDED = b"m:seeded"  # written into every new shard: it came from a rescale (``app.validator.rocks.shard``)
_EXPIRY = 8  # bytes of the big-endian expiry time in a tombstone key

Entries = Mapping[bytes, bytes]


def object_id_of(key: bytes) -> bytes | None:
    """Return the object id an entry belongs to (None for bookkeeping); raise ``UnknownShardKey`` for anything else."""
    if key.startswith(STATE):
        return key[len(STATE):]
    if key.startswith(TOMB) and len(key) >= len(TOMB) + _EXPIRY:
        return key[len(TOMB) + _EXPIRY:]
    if key.startswith(META):
        return None
    raise UnknownShardKey(f"shard key {key[:40]!r} is neither state, tombstone index nor bookkeeping")


def refuse_holds(holds: Iterable[tuple[int, bytes | None]]) -> None:
    """Raise ``HoldsInFlight`` if any shard's ``m:holds`` (old partition, its value) holds an object."""
    held = {p: len(json.loads(raw)) for p, raw in holds if raw is not None and json.loads(raw)}
    if held:
        raise HoldsInFlight(f"shards {sorted(held)} hold {sum(held.values())} objects waiting for decisions that span "
                            "objects: let the validator run until their records are decided "
                            "(docs/concepts/multi-object.md), then rescale")


def merged_rules(shards: Iterable[Entries]) -> ShardRules:
    """Return the union of the rules versions the shards have seen and the version in force on all of them."""
    documents: dict[int, str] = {}
    actives: set[int | None] = set()
    for entries in shards:
        rules = decode_shard_rules(entries.get(M_RULES))
        actives.add(rules.active)
        for version, doc in rules.documents.items():
            if documents.setdefault(version, doc) != doc:
                raise RulesDiverged(f"two shards hold different documents for rules version {version}")
    if len(actives) > 1:
        raise RulesDiverged(f"the shards are on rules versions {sorted(actives, key=lambda v: -1 if v is None else v)}"
                            ": a deploy is half way; run `arbiter rules deploy` again to finish it, let the "
                            "validator drain, then rescale")
    active = next(iter(actives), None)
    return NO_RULES if active is None and not documents else ShardRules(documents, active)


def seed_meta(rules: ShardRules) -> dict[bytes, bytes]:
    """Return the bookkeeping every new shard starts with: the seed marker and, if any, the merged rules."""
    meta = {M_SEEDED: b"1"}
    if rules is not NO_RULES:
        meta[M_RULES] = encode_shard_rules(rules)
    return meta


def route(entries: Iterable[tuple[bytes, bytes]], shard: int, shards: int,
          partitions: int) -> Iterator[tuple[int, bytes, bytes]]:
    """Yield ``(new partition, key, value)`` for each object entry of old shard ``shard`` of ``shards``.

    An entry whose id the old count does not route to ``shard`` is refused (``RESCALE_UNKNOWN_KEY``): the
    validator never stores one (it rejects such a command MISROUTED), so the routing is broken, and an id could
    be in two shards; checking it here keeps every id in exactly one new shard without remembering the ids.
    Entries are hashed ``ROUTE_CHUNK`` at a time (``positive_hashes``), in order.
    """
    it = iter(entries)
    while chunk := list(islice(it, ROUTE_CHUNK)):
        kept = [(key, value, oid) for key, value in chunk if (oid := object_id_of(key)) is not None]
        if not kept:
            continue
        hashes = positive_hashes([oid for _, _, oid in kept])
        wrong = np.flatnonzero(hashes % shards != shard)
        if wrong.size:
            key, _, oid = kept[int(wrong[0])]
            raise UnknownShardKey(f"shard {shard} of {shards} holds {key[:40]!r}, whose id routes to shard "
                                  f"{partition_for(oid, shards)}")
        for (key, value, _), p in zip(kept, (hashes % partitions).tolist(), strict=True):
            yield p, key, value


#: Entries hashed at once by ``route``: large enough that numpy's per-call cost vanishes, small enough to stay in cache.
ROUTE_CHUNK = 8192


def split(shards: Mapping[int, Entries], partitions: int, old: int | None = None) -> dict[int, dict[bytes, bytes]]:
    """Return the entries of ``partitions`` new shards made from ``shards`` (old partition -> its entries) in memory.

    ``old`` is the old partition count (default: one more than the highest old partition). Every new shard is
    present (an empty one holds the bookkeeping only), so each restores from its seed rather than starting as
    if it never had state. ``app.rescale.seed`` streams the same ``route`` shard by shard instead.
    """
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    refuse_holds((p, entries.get(M_HOLDS)) for p, entries in shards.items())
    meta = seed_meta(merged_rules(shards.values()))
    out: dict[int, dict[bytes, bytes]] = {p: dict(meta) for p in range(partitions)}
    count = old if old is not None else max(shards, default=-1) + 1
    for shard, entries in shards.items():
        for p, key, value in route(entries.items(), shard, count, partitions):
            out[p][key] = value
    return out
