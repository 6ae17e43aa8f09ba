"""One command-topic partition's state in one rocksdict database: decide a batch, write it atomically, re-emit on replay.

Keys: ``s:<object id>`` → 8-byte write time (ms, the batch's processing time) + the object's state (codec
bytes); ``t:<expiry ms><object id>`` → an index of tombstones by expiry; ``m:*`` → the shard's bookkeeping, written in
the same WriteBatch as the states: the last applied batch id, its source offset range, its output
records and its changelog (so a crash between the local write and the upload or the Kafka write is
repaired by the re-run of the same batch id, which re-emits the stored records byte for byte). The outputs and
the changelog are stored in bounded chunks with 64-bit framing (``frames``): a batch of any size fits.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import struct
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC
from functools import partial
from pathlib import Path
from types import ModuleType

import rocksdict

from app.errors import ArbiterError
from app.limits import size_limits
from app.native.core import load as core_module
from app.rules.control import is_control
from app.settings import Settings
from app.validator.fold import InputRecord, OutputRecord, fold, limits_for
from app.validator.lock import FileLock, rocks_root
from app.validator.multi import decode_holds, encode_holds, fold_multi, is_multi, message_headers, uses_multi
from app.validator.outputs import outcome_record, source_topic
from app.validator.rocks.checkpoint import Changelog, CheckpointCorrupt, Entry, ShardStore, encode_changelog
from app.validator.rocks.core_step import FALLBACKS, KeyResult, core_config, decide_keys
from app.validator.rocks.core_step import unusable as core_unusable
from app.validator.rocks.frames import chunk_entries, decode_outputs, encode_outputs, read_chunked
from app.validator.rocks.memory import shard_options
from app.validator.rules import ShardRules, control_step, decode_shard_rules, encode_shard_rules, rules_checker
from commands import ObjectState
from commands.unique import Hold
from schemas import codec

STATE = b"s:"
TOMB = b"t:"
M_BATCH = b"m:batch"
M_RANGE = b"m:range"
M_OUT = b"m:out"
M_SINCE = b"m:since"  # changelogs since the last snapshot
M_LOG = b"m:log"      # the last batch's changelog bytes (not itself part of the changelog)
M_LINEAGE = b"m:lineage"  # this local database's id for incremental snapshots (local only, not in changelogs)
M_SEED = b"m:seed"        # the SST list of the snapshot it was restored from (local only)
M_RULES = b"m:rules"      # the rules versions this shard has seen and the one in force (app.validator.rules)
M_SEEDED = b"m:seeded"    # in a database restored from a rescale's seed (app.rescale.split): do not fetch it again
M_HOLDS = b"m:holds"      # objects waiting for decisions that span objects (app.validator.multi)

_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_UTC = UTC


class ShardOrderError(ArbiterError):
    """A Spark task's rows are not one Kafka partition in strictly rising offsets; nothing was written."""

    code = "SHARD_ORDER"


class ShardStateError(ArbiterError):
    """The shard's state does not fit the batch Spark asks for (ahead of it, or another offset range)."""

    code = "SHARD_STATE"


@dataclass(frozen=True, slots=True)
class ShardResult:
    """What one task did: the records to emit and whether they were re-emitted from a previous attempt."""

    outputs: list[OutputRecord]
    replayed: bool
    restored_from: str  # "local", "changelogs", "snapshot", "seed" (app.rescale) or "empty"


def shard_dir(settings: Settings, checkpoint: str, partition: int) -> Path:
    """Return the local directory of ``partition``'s database for ``checkpoint``."""
    return rocks_root(settings, checkpoint) / f"shard-{partition:04d}"


HOST_ROCKS_DIR = "ARBITER_ROCKS_DIR"  # read from the executor host's own environment by ``host_settings``


def host_settings(settings: Settings) -> Settings:
    """Return ``settings`` with ``rocks_dir`` set from this host's environment when ``ARBITER_ROCKS_DIR`` is set here.

    On a cluster the driver's settings travel to the executors, but a local disk is a fact of each host, as
    Spark's own ``SPARK_LOCAL_DIRS`` is: a worker started with ``ARBITER_ROCKS_DIR`` keeps its shards there,
    whatever the driver's value. In local mode the executor is the driver's process and reads the same value.
    """
    local = os.environ.get(HOST_ROCKS_DIR)
    if not local or Path(local) == settings.rocks_dir:
        return settings
    return settings.model_copy(update={"rocks_dir": Path(local)})


def check_order(records: Sequence[InputRecord]) -> None:
    """Raise ``ShardOrderError`` unless all records share one topic partition with strictly rising offsets."""
    first = records[0]
    last_offset = first.offset - 1
    for r in records:
        if r.partition != first.partition or r.topic != first.topic:
            raise ShardOrderError(f"one task holds {first.topic}[{first.partition}] and {r.topic}[{r.partition}]: "
                                  "the source must not set minPartitions or repartition before the shard step")
        if r.offset <= last_offset:
            raise ShardOrderError(f"{r.topic}[{r.partition}] offset {r.offset} after {last_offset}: "
                                  "rows are out of offset order; refusing to decide them")
        last_offset = r.offset


class StateCache:
    """Decoded states of one open shard, as stored: ``key -> (write time ms, state)``, least recently used first.

    A shard server decides batch after batch on the same shard; decoding a state with a full dedup window is
    the largest single cost of a command (``python -m bench.domain``). Every entry equals what decoding the
    stored bytes gives, so a hit decides exactly as a miss would: the shard puts a state here only after the
    write that stored it, and forgets what anything else changes (a changelog applied, a tombstone swept).
    Bounded by an estimate of its memory, 4x the stored bytes (a decoded 1.7 kB state takes ~6.9 kB).
    """

    __slots__ = ("_budget", "_entries", "_used", "hits", "misses")

    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._entries: dict[bytes, tuple[int, ObjectState, int]] = {}
        self._used = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> tuple[int, ObjectState] | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            self.misses += 1
            return None
        self._entries[key] = entry  # most recently used last
        self.hits += 1
        return entry[0], entry[1]

    def put(self, key: bytes, written_ms: int, state: ObjectState, stored_bytes: int) -> None:
        cost = 4 * stored_bytes + 200
        old = self._entries.pop(key, None)
        if old is not None:
            self._used -= old[2]
        if cost > self._budget:
            return
        self._entries[key] = (written_ms, state, cost)
        self._used += cost
        while self._used > self._budget:
            _, (_, _, freed) = _pop_oldest(self._entries)
            self._used -= freed

    def items(self) -> list[tuple[bytes, int, ObjectState]]:
        """Return ``(key, write time ms, state)`` of every entry, least recently used first."""
        return [(k, written, state) for k, (written, state, _) in self._entries.items()]

    def discard(self, key: bytes) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._used -= old[2]

    def clear(self) -> None:
        self._entries.clear()
        self._used = 0


def _pop_oldest(entries: dict[bytes, tuple[int, ObjectState, int]]) -> tuple[bytes, tuple[int, ObjectState, int]]:
    key = next(iter(entries))
    return key, entries.pop(key)


class Shard:
    """An open shard database; use ``open_shard`` and close it before the task ends."""

    def __init__(self, db: rocksdict.Rdict, store: ShardStore, restored_from: str, cache_mb: int = 0) -> None:
        self.db = db
        self.store = store
        self.restored_from = restored_from
        # What this open shard did, for the operations view (app/validator/rocks/server.py writes them out).
        self.counters: Counter[str] = Counter()
        self.cache = StateCache(cache_mb << 20)
        self._rules: ShardRules | None = None  # as stored under M_RULES, read on first use
        self._holds: dict[str, Hold] | None = None  # as stored under M_HOLDS, read on first use
        self._holds_next: dict[str, Hold] | None = None  # what the batch being written leaves held
        self._switched = False
        self._core_module: ModuleType | None | bool = False  # False: not looked up yet

    def close(self) -> None:
        self.db.close()

    def lineage(self) -> str:
        """Return this local database's lineage id (made on first use: a new or restored database gets a new one)."""
        raw = self.db.get(M_LINEAGE)
        if raw is None:
            raw = uuid.uuid4().hex.encode()
            self.db.put(M_LINEAGE, raw)
        return bytes(raw).decode()

    def _read(self, key: bytes) -> bytes:
        data = read_chunked(self.db.get, key)
        if data is None:
            raise CheckpointCorrupt(f"shard value {key!r} is missing")
        return data

    def rules(self) -> ShardRules:
        """Return the rules versions this shard has seen and the one in force."""
        if self._rules is None:
            self._rules = decode_shard_rules(self.db.get(M_RULES))
        return self._rules

    def holds(self) -> dict[str, Hold]:
        """Return the objects of this shard held by a decision that spans objects, by id."""
        if self._holds is None:
            self._holds = decode_holds(self.db.get(M_HOLDS))
        return self._holds

    def last_batch(self) -> int:
        raw = self.db.get(M_BATCH)
        return -1 if raw is None else _Q.unpack(raw)[0]

    def apply_changelog(self, log: Changelog, data: bytes) -> None:
        """Replay a changelog from the checkpoint location into the local database."""
        self.cache.clear()  # the states change under the cache
        self._rules = None  # and maybe the rules
        self._holds = None  # and the holds
        wb = rocksdict.WriteBatch(raw_mode=True)
        _put_all(wb, log.entries)
        _put_all(wb, chunk_entries(M_LOG, data, self.db.get(M_LOG)))
        self.db.write(wb)

    def run(self, batch_id: int, records: Sequence[InputRecord], settings: Settings, now_ms: int) -> ShardResult:
        """Decide ``records`` (one partition's share of batch ``batch_id``) or re-emit what that batch wrote.

        ``now_ms`` is the batch's processing time, fixed by the driver, so a retried task computes the same bytes.
        """
        check_order(records)
        span = _QQ.pack(records[0].offset, records[-1].offset)
        last = self.last_batch()
        if last == batch_id:
            if self.db.get(M_RANGE) != span:
                raise ShardStateError(f"batch {batch_id} was applied to shard {records[0].partition} with offsets "
                                      f"{_QQ.unpack(self.db.get(M_RANGE) or _QQ.pack(-1, -1))}, now asked for "
                                      f"{_QQ.unpack(span)}: refusing to decide one batch twice")
            if batch_id not in self.store.changelogs():
                self.store.put_changelog(self._read(M_LOG))
            return ShardResult(decode_outputs(self._read(M_OUT), source_topic(settings), partial(message_headers, settings)),
                               True, self.restored_from)
        if last > batch_id:
            raise ShardStateError(f"shard {records[0].partition} has applied batch {last}, Spark asks for older "
                                  f"batch {batch_id}: the state belongs to another checkpoint or run")
        entries = self._sweep(now_ms)
        self.counters["ttl_evictions"] += len(entries) // 2
        decided: list[tuple[bytes, int, ObjectState, int]] = []
        outputs = self._decide(records, settings, now_ms, entries, decided)
        since = self.db.get(M_SINCE)
        since_n = (_Q.unpack(since)[0] if since else 0) + 1
        entries += [(M_BATCH, _Q.pack(batch_id)), (M_RANGE, span),
                    *chunk_entries(M_OUT, encode_outputs(outputs), self.db.get(M_OUT)), (M_SINCE, _Q.pack(since_n))]
        log = encode_changelog(batch_id, last, entries)
        wb = rocksdict.WriteBatch(raw_mode=True)
        _put_all(wb, entries)
        _put_all(wb, chunk_entries(M_LOG, log, self.db.get(M_LOG)))
        self.db.write(wb)  # one atomic write, WAL on: states, outputs and batch id together or not at all
        if self._switched:
            self._rules, self._switched = None, False
        if self._holds_next is not None:
            self._holds, self._holds_next = self._holds_next, None
        for key, written, state, size in decided:  # stored now: the cache may hold them as decoded
            self.cache.put(key, written, state, size)
        self.store.put_changelog(log)
        self.counters["changelog_bytes"] += len(log)
        self.counters["batches"] += 1
        self.counters["records"] += len(records)
        if since_n >= settings.snapshot_every:
            self.snapshot(batch_id, settings.snapshots_kept)
        return ShardResult(outputs, False, self.restored_from)

    def _sweep(self, now_ms: int) -> list[Entry]:
        """Return the deletes of tombstones whose ``tombstone_ttl_ms`` has passed (and of their index entries)."""
        entries: list[Entry] = []
        horizon = TOMB + _Q.pack(now_ms)
        for key in self.db.keys(from_key=TOMB):
            if not key.startswith(TOMB) or key > horizon:
                break
            object_id = key[len(TOMB) + 8:]
            self.cache.discard(object_id)  # deleted below: the next command on this id finds nothing
            entries += [(STATE + object_id, None), (key, None)]
        return entries

    def _decide(self, records: Sequence[InputRecord], settings: Settings, now_ms: int,
                entries: list[Entry], decided: list[tuple[bytes, int, ObjectState, int]]) -> list[OutputRecord]:
        """Fold each key's records over its state; append the writes to ``entries`` and the new states to ``decided``."""
        outputs: list[OutputRecord | None] = [None] * len(records)
        records, rules, multi = self._apply_controls(records, settings, entries, outputs)
        # Group by key keeping offset order (check_order has verified it), so fold need not sort.
        by_key: dict[bytes | None, tuple[list[int], list[InputRecord]]] = {}
        for i, r in enumerate(records):
            if r is None:
                continue  # a control record, decided above
            group = by_key.get(r.key)
            if group is None:
                by_key[r.key] = ([i], [r])
            else:
                group[0].append(i)
                group[1].append(r)
        holds = self.holds()
        if holds or multi or (rules.active is not None and uses_multi(rules, {r.rules for r in records if r is not None})):
            return self._decide_multi(by_key, holds, rules, settings, now_ms, entries, decided, outputs)
        cache = self.cache
        cached: dict[bytes, tuple[int, ObjectState]] = {}
        keys: list[bytes] = []
        # Rules deployed or withdrawn within this batch (records tagged with two versions): every key in Python. Under
        # rules in force for the whole batch the core decides (typed objects whose kind has guards come back as "guards").
        core = self._core(settings)
        if core is not None and self._switched:
            core = None
            held_back = sum(len(group[1]) for group in by_key.values())
            self.counters["core_fallback_records"] += held_back
            self.counters["core_fallback_rules"] += held_back
        by_core: dict[bytes, KeyResult] = {}
        if core is not None:
            # The core reads stored bytes, never the Python cache (equal by the cache's invariant).
            keys = [k for k in by_key if k is not None]
            raw_states = self.db.get([STATE + k for k in keys]) if keys else []
            partition = next(iter(by_key.values()))[1][0].partition if by_key else 0
            config = core_config(core, settings, partition, now_ms, rules.ruleset(rules.active))
            results = decide_keys(core, config, keys, raw_states,
                                  [by_key[k][1] for k in keys])
            by_core = dict(zip(keys, results, strict=True))
        else:
            for k in by_key:
                if k is not None:
                    hit = cache.get(k)
                    if hit is None:
                        keys.append(k)
                    else:
                        cached[k] = hit
            raw_states = self.db.get([STATE + k for k in keys]) if keys else []
        stored = dict(zip(keys, raw_states, strict=True))
        limits = limits_for(settings)
        parked: list[OutputRecord] = []  # full copies of records that did not decode (app.validator.parking)
        stamp = _Q.pack(now_ms)
        counters = self.counters
        forget = len(cache) > 0  # with the core always on the cache stays empty: no discard per key
        for key, (idx, recs) in by_key.items():
            decided_here = by_core.get(key) if key is not None and core is not None else None
            if type(decided_here) is tuple:
                outs, value, deleted = decided_here
                for i, o in zip(idx, outs, strict=True):
                    outputs[i] = o
                counters["core_records"] += len(idx)
                if value is not None:
                    entries.append((STATE + key, value))
                    if forget:
                        cache.discard(key)  # decided without it: a later Python fold decodes the stored bytes
                    if deleted:
                        entries.append((TOMB + _Q.pack(now_ms + settings.tombstone_ttl_ms) + key, b""))
                continue
            if core is not None:
                counters["core_fallback_records"] += len(idx)
                why = FALLBACKS.get(decided_here, "other") if type(decided_here) is int else "no_key"
                counters[f"core_fallback_{why}"] += len(idx)
            hit = cached.get(key) if key is not None else None
            if hit is not None:
                load = partial(aged_state, hit[1], hit[0], now_ms, settings)
            else:
                load = partial(self._load, key, stored.get(key) if key is not None else None, now_ms, settings)
            outs, new_state, changed = fold(load, recs, settings, limits, ordered=True, parked=parked, rules=rules)
            if len(outs) != len(idx):
                raise ShardStateError(f"fold returned {len(outs)} outcomes for {len(idx)} records")
            if len(idx) == 1:
                outputs[idx[0]] = outs[0]
            else:
                for i, o in zip(idx, outs, strict=True):
                    outputs[i] = o
            # A batch whose commands on this object were all rejected leaves its state untouched: no write.
            if changed and key is not None and new_state is not None:
                value = stamp + codec.encode_state(new_state)
                entries.append((STATE + key, value))
                if cacheable(new_state):
                    decided.append((key, now_ms, new_state, len(value)))
                else:
                    cache.discard(key)
                if new_state.deleted:
                    entries.append((TOMB + _Q.pack(now_ms + settings.tombstone_ttl_ms) + key, b""))
        return [o for o in outputs if o is not None] + parked

    def _decide_multi(self, by_key: dict[bytes | None, tuple[list[int], list[InputRecord]]], holds: dict[str, Hold],
                      rules: ShardRules, settings: Settings, now_ms: int, entries: list[Entry],
                      decided: list[tuple[bytes, int, ObjectState, int]],
                      outputs: list[OutputRecord | None]) -> list[OutputRecord]:
        """``_decide`` for a batch with multi-object work (app.validator.multi): every key in Python, with its hold."""
        if self._core(settings) is not None:  # the core could have run: these records are its fallbacks, so counted
            held_back = sum(len(idx) for idx, _ in by_key.values())
            self.counters["core_fallback_records"] += held_back
            self.counters["core_fallback_multi"] += held_back
        keys = [k for k in by_key if k is not None and self.cache.get(k) is None]
        stored = dict(zip(keys, self.db.get([STATE + k for k in keys]) if keys else [], strict=True))
        limits = limits_for(settings)
        parked: list[OutputRecord] = []
        sent: list[OutputRecord] = []  # protocol records, after every outcome
        stamp = _Q.pack(now_ms)
        after = dict(holds)
        for key, (idx, recs) in by_key.items():
            hit = self.cache.get(key) if key is not None else None
            if hit is not None:
                load = partial(aged_state, hit[1], hit[0], now_ms, settings)
            else:
                load = partial(self._load, key, stored.get(key) if key is not None else None, now_ms, settings)
            name = key.decode("utf-8", "surrogateescape") if key is not None else None
            done = fold_multi(load, after.get(name) if name is not None else None, recs, settings, limits, rules,
                              parked)
            if len(done.outputs) != len(idx):
                raise ShardStateError(f"fold_multi returned {len(done.outputs)} outcomes for {len(idx)} records")
            for i, o in zip(idx, done.outputs, strict=True):
                outputs[i] = o
            sent += done.sent
            if name is not None and done.hold_changed:
                if done.hold is None:
                    after.pop(name, None)
                else:
                    after[name] = done.hold
            if done.changed and key is not None:
                self.cache.discard(key)
                if done.state is None:
                    entries.append((STATE + key, None))
                    continue
                value = stamp + codec.encode_state(done.state)
                entries.append((STATE + key, value))
                if cacheable(done.state):
                    decided.append((key, now_ms, done.state, len(value)))
                if done.state.deleted:
                    entries.append((TOMB + _Q.pack(now_ms + settings.tombstone_ttl_ms) + key, b""))
        if after != holds:
            entries.append((M_HOLDS, encode_holds(after)))
            self._holds_next = after
        return [o for o in outputs if o is not None] + parked + sent

    def _core(self, settings: Settings) -> ModuleType | None:
        """Return the compiled core when ``settings.core`` allows it, a verified build exists and the schemas fit."""
        if self._core_module is False:
            module = core_module(settings.core)
            self._core_module = module if module is not None and core_unusable() is None else None
        return self._core_module or None

    def _apply_controls(self, records: Sequence[InputRecord], settings: Settings, entries: list[Entry],
                        outputs: list[OutputRecord | None]) -> tuple[list[InputRecord | None], ShardRules, bool]:
        """Apply the batch's control records in offset order; tag each command with the rules version at its offset.

        Returns the records with each control record replaced by None (its output is in ``outputs``), the
        shard's rules after the batch and whether a protocol record (``app.validator.multi``) is among them; a
        switch adds the new rules to ``entries``, so it is written, logged and snapshotted with the states it decided.
        """
        rules = self.rules()
        if rules.active is None and not any(r.control for r in records):
            return list(records), rules, False  # the common case: no rules, nothing to tag, no protocol record
        checker, keep = rules_checker(settings), size_limits(settings.max_message_bytes).keep_bytes
        tagged: list[InputRecord | None] = []
        before = rules
        multi = False
        for i, r in enumerate(records):
            if r.control is not None and is_multi(r.control):
                multi = True
            if is_control(r.control):
                step = control_step(rules, r.key, r.value, r.signature, r.topic, r.partition, r.offset, checker, keep)
                rules = step.rules
                if step.outcome is not None:
                    outputs[i] = outcome_record(step.outcome, settings, r.partition)
                tagged.append(None)
            else:
                tagged.append(r if rules.active is None else r._replace(rules=rules.active))
        if rules is not before:
            self._switched = True  # re-read after the batch's write: the stored rules are the truth
            entries.append((M_RULES, encode_shard_rules(rules)))
        return tagged, rules, multi

    def _load(self, key: bytes | None, raw: bytes | None, now_ms: int, settings: Settings) -> ObjectState | None:
        """Return ``load_state`` of ``raw``; keep the state as decoded in the cache."""
        if raw is None or key is None:
            return None
        (written,) = _Q.unpack_from(raw)
        state = codec.decode_state(raw[8:])
        self.cache.put(key, written, state, len(raw))
        return aged_state(state, written, now_ms, settings)

    def snapshot(self, batch_id: int, keep: int) -> None:
        """Upload a consistent copy of the database as the snapshot after ``batch_id``; clean up old ones."""
        self.db.put(M_SINCE, _Q.pack(0))  # before the copy, so a shard restored from it counts afresh
        tmp = Path(tempfile.mkdtemp(prefix="arbiter-snap-"))
        t0 = time.monotonic()
        try:
            rocksdict.Checkpoint(self.db).create_checkpoint(str(tmp / "db"))
            seed = self.db.get(M_SEED)
            self.counters["snapshot_bytes"] += self.store.put_snapshot(
                batch_id, tmp / "db", self.lineage(), json.loads(seed) if seed else None)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.counters["snapshots"] += 1
        self.counters["snapshot_ms"] += round((time.monotonic() - t0) * 1000)
        self.store.cleanup(keep)


def _put_all(wb: rocksdict.WriteBatch, entries: Sequence[Entry]) -> None:
    for key, value in entries:
        if value is None:
            wb.delete(key)
        else:
            wb.put(key, value)


def load_state(raw: bytes | None, now_ms: int, settings: Settings) -> ObjectState | None:
    """Decode a stored state, applying the reference backend's processing-time TTLs (docs/concepts/state-backends.md).

    A tombstone older than ``tombstone_ttl_ms`` is gone (the id is unknown again); a live object last written
    more than ``dedup_ttl_ms`` ago has forgotten its dedup entries. Both count from the batch that wrote it.
    """
    if raw is None:
        return None
    (written,) = _Q.unpack_from(raw)
    return aged_state(codec.decode_state(raw[8:]), written, now_ms, settings)


def cacheable(state: ObjectState) -> bool:
    """Return whether ``state`` is what decoding its stored bytes gives, so ``StateCache`` may hold it.

    Its window's last entry is the only one not read from storage: the codec stores a missing principal as ""
    and a missing fingerprint as 0, and reads them back as None; a fingerprint that is 0 (1 in 2**64) would not
    survive the trip, nor would a timestamp not in UTC, so such a state is decoded from storage instead.
    """
    if not state.recent:
        return True
    last = state.recent[-1]
    return last.fingerprint != 0 and last.principal != "" and last.at.tzinfo is _UTC


def aged_state(state: ObjectState, written: int, now_ms: int, settings: Settings) -> ObjectState | None:
    """Return ``state`` as a batch at ``now_ms`` sees it, ``written`` at that time: ``load_state``'s TTLs."""
    age = now_ms - written
    if state.deleted:
        return None if age > settings.tombstone_ttl_ms else state
    if state.recent and age > settings.dedup_ttl_ms:
        return replace(state, recent=())
    return state


def open_shard(path: Path, store: ShardStore, batch_id: int, settings: Settings) -> Shard:
    """Open the shard at ``path``, first bringing it level with the checkpoint location (the caller holds its lock).

    Level means: local batch == the newest durable changelog; or local is ahead by exactly the batch being
    re-run (applied, not yet uploaded: the re-run uploads it). Behind: apply the missing changelogs if the
    chain reaches the local batch, else replace the local copy with the newest snapshot plus its changelogs.
    """
    opts = shard_options(settings.rocks_memory_mb, settings.rocks_write_buffer_mb)
    path.parent.mkdir(parents=True, exist_ok=True)
    shard = Shard(rocksdict.Rdict(str(path), opts), store, "local", settings.shard_state_cache_mb)
    logs = store.changelogs()
    snaps = store.snapshots()
    durable = max([*logs, *snaps], default=-1)
    local = shard.last_batch()
    # A rescaled checkpoint starts from a seed, not empty (app.rescale): a fresh local copy fetches it first.
    unseeded = local == -1 and shard.db.get(M_SEEDED) is None and store.has_seed()
    if local >= durable and not unseeded:
        if local > durable and local != batch_id:
            shard.close()
            raise ShardStateError(f"local shard {path} is at batch {local} but the checkpoint's newest is {durable}; "
                                  "it belongs to another checkpoint or run: delete it to restore from the checkpoint")
        return shard
    chain: list[int] = []
    cur = durable
    while cur > local and cur in logs:
        chain.append(cur)
        cur = logs[cur]
    if cur == local and local >= 0:
        for b in reversed(chain):
            _replay(shard, store, b, logs[b])
        shard.restored_from = "changelogs"
        return shard
    shard.close()
    rocksdict.Rdict.destroy(str(path), opts)
    shutil.rmtree(path, ignore_errors=True)
    chain, cur = [], durable
    while cur not in snaps and cur != -1:
        if cur not in logs:
            raise CheckpointCorrupt(f"{store.base}: changelog of batch {cur} missing and no snapshot reaches it")
        chain.append(cur)
        cur = logs[cur]
    fetched, listed, source = 0, {}, "empty"
    if cur != -1:
        listed, source = store.fetch_snapshot(cur, path), "snapshot"
    elif store.has_seed():  # the chain reaches back to before batch 0 of a rescaled checkpoint: its seed
        store.fetch_seed(path)
        source = "seed"
    if source != "empty":
        fetched = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    shard = Shard(rocksdict.Rdict(str(path), opts), store, source, settings.shard_state_cache_mb)
    shard.counters["restore_bytes"] += fetched
    # A restored copy is a new lineage; the files it came from are already uploaded and may be listed again.
    shard.db.put(M_LINEAGE, uuid.uuid4().hex.encode())
    shard.db.put(M_SEED, json.dumps(listed).encode())
    for b in reversed(chain):
        _replay(shard, store, b, logs[b])
    return shard


def _replay(shard: Shard, store: ShardStore, batch_id: int, prev: int) -> None:
    log, data = store.read_changelog(batch_id, prev)
    shard.apply_changelog(log, data)
    shard.counters["restore_bytes"] += len(data)


def run_task(settings: Settings, checkpoint: str, batch_id: int, records: Sequence[InputRecord],
             now_ms: int) -> ShardResult:
    """Lock the records' shard, bring it level with the checkpoint, decide or re-emit, close and unlock."""
    partition = records[0].partition
    path = shard_dir(settings, checkpoint, partition)
    lock = FileLock(path.with_name(path.name + ".lock"))
    lock.acquire(settings.shard_lock_timeout_s)
    # The task allocates tens of thousands of small acyclic objects (commands, states, events) that stay alive
    # until it ends: the cyclic collector would traverse them again and again for nothing (5-10 % of a task in
    # bench.validator.shard_task). Let it run after the task instead; nothing here needs it to free memory.
    collecting = gc.isenabled()
    gc.disable()
    try:
        store = ShardStore(checkpoint, partition, fsync=settings.checkpoint_fsync)
        shard = open_shard(path, store, batch_id, settings)
        try:
            return shard.run(batch_id, records, settings, now_ms)
        finally:
            shard.close()
    finally:
        if collecting:
            gc.enable()
        lock.release()
