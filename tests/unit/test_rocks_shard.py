"""The rocksdb shard on its own: decide a batch like ``fold`` would, re-emit a replayed batch, restore, TTL, order."""

from __future__ import annotations

import random
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.settings import Settings
from app.validator.fold import InputRecord, fold
from app.validator.rocks.checkpoint import CheckpointCorrupt, ShardStore, decode_changelog, encode_changelog
from app.validator.rocks.shard import (
    STATE,
    Shard,
    ShardOrderError,
    ShardStateError,
    decode_outputs,
    encode_outputs,
    open_shard,
    run_task,
    shard_dir,
)
from commands import CreateObject, DeleteObject, GrantEditor, UpdateObject
from schemas import codec
from tests.unit.record_strategies import signature

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
NOW = 1_800_000_000_000
TOPIC = "commands"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(partitions=1, var_dir=tmp_path / "var", snapshot_every=1000, rocks_memory_mb=16,
                    rocks_write_buffer_mb=4)


@pytest.fixture
def ckpt(tmp_path: Path) -> str:
    return str(tmp_path / "ckpt")


def rec(cmd: object, offset: int, value: bytes | None = None, key: bytes | None = None) -> InputRecord:
    k = key if key is not None else cmd.object_id.encode()  # type: ignore[attr-defined]
    v = value if value is not None else codec.encode_command(cmd)  # type: ignore[arg-type]
    return InputRecord(k, v, TOPIC, 0, offset, signature(k, v))


def random_commands(n: int, objects: int, seed: int, start: int = 0) -> list[InputRecord]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        oid = f"o{rnd.randrange(objects)}"
        at = T0 + timedelta(seconds=start + i)
        kind = rnd.random()
        cid = f"c{seed}-{i}" if rnd.random() > 0.1 else f"c{seed}-{max(i - 1, 0)}"  # some retries
        if kind < 0.3:
            cmd = CreateObject(cid, oid, "alice", at, document='{"a": 1}')
        elif kind < 0.8:
            cmd = UpdateObject(cid, oid, rnd.choice(["alice", "bob"]), at, patch='{"b": 2}')
        elif kind < 0.9:
            cmd = GrantEditor(cid, oid, "alice", at, editor="bob")
        else:
            cmd = DeleteObject(cid, oid, "alice", at)
        out.append(rec(cmd, start + i))
    out.append(rec(CreateObject("bad", "o1", "alice", T0, document="{}"), start + n, value=b"\x00\x00\x00\x00\x01junk"))
    return out


def reference(batches: list[list[InputRecord]], settings: Settings) -> list[list[tuple]]:
    """What ``fold`` gives over the same records with an in-memory dict: the expected outputs."""
    states: dict[bytes | None, object] = {}
    result = []
    for batch in batches:
        outs = []
        parked: list = []  # full copies of undecodable records: the shard writes them after the outcomes
        for r in batch:
            out, st, changed = fold(lambda k=r.key: states.get(k), [r], settings,  # type: ignore[arg-type, return-value]
                                    parked=parked)
            if changed:
                states[r.key] = st
            outs += out
        result.append(outs + parked)
    return result


def test_outputs_equal_fold_over_batches_and_state_survives_reopen(settings: Settings, ckpt: str) -> None:
    batches = [random_commands(200, 30, seed=s, start=s * 1000) for s in range(3)]
    expected = reference(batches, settings)
    for b, batch in enumerate(batches):
        got = run_task(settings, ckpt, b, batch, NOW)
        assert not got.replayed
        assert got.outputs == expected[b]
    assert sorted(ShardStore(ckpt, 0).changelogs()) == [0, 1, 2]


def test_rerun_of_an_applied_batch_reemits_identical_bytes(settings: Settings, ckpt: str) -> None:
    batch = random_commands(50, 10, seed=7)
    first = run_task(settings, ckpt, 0, batch, NOW)
    again = run_task(settings, ckpt, 0, batch, NOW + 999_999)  # a later clock must not change a replay
    assert again.replayed and again.outputs == first.outputs
    with pytest.raises(ShardStateError, match="refusing to decide one batch twice"):
        run_task(settings, ckpt, 0, batch[:10], NOW)
    with pytest.raises(ShardStateError, match="older batch"):
        run_task(settings, ckpt, -1, batch, NOW)


def test_out_of_order_or_mixed_partitions_fail_loudly(settings: Settings, ckpt: str) -> None:
    batch = random_commands(5, 3, seed=1)
    with pytest.raises(ShardOrderError, match="out of offset order"):
        run_task(settings, ckpt, 0, [batch[1], batch[0]], NOW)
    other = InputRecord(batch[1].key, batch[1].value, TOPIC, 1, 99, batch[1].signature)
    with pytest.raises(ShardOrderError, match="minPartitions"):
        run_task(settings, ckpt, 0, [batch[0], other], NOW)
    assert not ShardStore(ckpt, 0).changelogs()


@pytest.mark.parametrize("snapshot_every", [1000, 2])
def test_lost_local_state_is_restored_from_the_checkpoint(settings: Settings, ckpt: str, snapshot_every: int) -> None:
    s = settings.model_copy(update={"snapshot_every": snapshot_every, "snapshots_kept": 1})
    batches = [random_commands(100, 20, seed=i, start=i * 1000) for i in range(6)]
    expected = reference(batches, s)
    for b in range(5):
        assert run_task(s, ckpt, b, batches[b], NOW).outputs == expected[b]
    store = ShardStore(ckpt, 0)
    if snapshot_every == 2:
        assert store.snapshots() == [3], "cleanup keeps the newest snapshot only"
        assert sorted(store.changelogs()) == [4]
    shutil.rmtree(shard_dir(s, ckpt, 0))
    got = run_task(s, ckpt, 5, batches[5], NOW)
    assert got.restored_from == ("snapshot" if snapshot_every == 2 else "empty")
    assert got.outputs == expected[5]


def test_stale_local_copy_catches_up_with_changelogs(settings: Settings, ckpt: str, tmp_path: Path) -> None:
    batches = [random_commands(60, 10, seed=i, start=i * 1000) for i in range(4)]
    expected = reference(batches, settings)
    run_task(settings, ckpt, 0, batches[0], NOW)
    stale = tmp_path / "stale"
    shutil.copytree(shard_dir(settings, ckpt, 0), stale)
    run_task(settings, ckpt, 1, batches[1], NOW)
    run_task(settings, ckpt, 2, batches[2], NOW)
    shutil.rmtree(shard_dir(settings, ckpt, 0))
    shutil.copytree(stale, shard_dir(settings, ckpt, 0))  # as if this executor last held the shard at batch 0
    got = run_task(settings, ckpt, 3, batches[3], NOW)
    assert got.restored_from == "changelogs"
    assert got.outputs == expected[3]


def test_applied_but_not_uploaded_batch_is_uploaded_by_its_rerun(settings: Settings, ckpt: str) -> None:
    batch = random_commands(20, 5, seed=3)
    first = run_task(settings, ckpt, 0, batch, NOW)
    store = ShardStore(ckpt, 0)
    for b, prev in store.changelogs().items():  # the crash came after the local write, before the upload
        Path(store._changelog_path(b, prev)).unlink()
    again = run_task(settings, ckpt, 0, batch, NOW)
    assert again.replayed and again.outputs == first.outputs
    assert list(store.changelogs()) == [0]


def test_local_state_ahead_of_the_checkpoint_is_refused(settings: Settings, ckpt: str) -> None:
    run_task(settings, ckpt, 0, random_commands(5, 2, seed=1), NOW)
    run_task(settings, ckpt, 1, random_commands(5, 2, seed=2, start=100), NOW)
    store = ShardStore(ckpt, 0)
    shutil.rmtree(Path(store.base))
    with pytest.raises(ShardStateError, match="belongs to another checkpoint"):
        run_task(settings, ckpt, 0, random_commands(5, 2, seed=1), NOW)


def test_tombstone_expires_after_its_ttl_and_is_swept(settings: Settings, ckpt: str) -> None:
    s = settings.model_copy(update={"tombstone_ttl_ms": 1000})
    create = rec(CreateObject("c1", "o1", "alice", T0, document="{}"), 0)
    delete = rec(DeleteObject("c2", "o1", "alice", T0), 1)
    run_task(s, ckpt, 0, [create, delete], NOW)
    again = rec(CreateObject("c3", "o1", "alice", T0 + timedelta(seconds=5), document="{}"), 2)
    early = run_task(s, ckpt, 1, [again], NOW + 1000)
    assert codec.decode_outcome(early.outputs[0][2]).reason.value == "DELETED"  # type: ignore[union-attr]
    later = rec(CreateObject("c4", "o1", "bob", T0 + timedelta(seconds=6), document="{}"), 3)
    late = run_task(s, ckpt, 2, [later], NOW + 1001)
    ev = codec.decode_outcome(late.outputs[0][2])
    assert ev.version == 1 and ev.owner == "bob"  # type: ignore[union-attr]
    shard = open_shard(shard_dir(s, ckpt, 0), ShardStore(ckpt, 0), 3, s)
    try:
        assert [k for k in shard.db.keys() if k.startswith(b"t:")] == []
        assert shard.db.get(STATE + b"o1") is not None
    finally:
        shard.close()


def test_changelog_and_outputs_framing_round_trip_and_detect_damage() -> None:
    entries = [(b"s:a", b"x" * 10), (b"s:b", None), (b"", b"")]
    data = encode_changelog(5, 3, entries)
    log = decode_changelog(data)
    assert (log.batch_id, log.prev, log.entries) == (5, 3, entries)
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        decode_changelog(data[:-5] + b"\xff" + data[-4:])
    with pytest.raises(CheckpointCorrupt):
        decode_changelog(data[:10])
    outs = reference([random_commands(20, 5, seed=4)], Settings())[0]
    assert decode_outputs(encode_outputs(outs), Settings().topic_commands) == outs


def test_snapshots_upload_only_new_sst_files_and_share_the_rest(settings: Settings, ckpt: str) -> None:
    """Incremental snapshots: each one uploads the SST files no kept snapshot has; restore and cleanup still hold."""
    s = settings.model_copy(update={"snapshot_every": 1, "snapshots_kept": 2})
    batches = [random_commands(150, 40, seed=i, start=i * 1000) for i in range(6)]
    expected = reference(batches, s)
    store = ShardStore(ckpt, 0)
    uploaded, listed = [], []
    for b in range(4):
        shard = open_shard(shard_dir(s, ckpt, 0), store, b, s)
        try:
            before = shard.counters["snapshot_bytes"]
            assert shard.run(b, batches[b], s, NOW).outputs == expected[b]
            uploaded.append(shard.counters["snapshot_bytes"] - before)
            listed.append(store.manifests()[b].sst)
        finally:
            shard.close()
    sst_dir = Path(store.base) / "snapshot" / "sst"
    # Snapshot 1 lists the file snapshot 0 uploaded (and uploads only what is new); compaction may rewrite later.
    assert set(listed[0].values()) <= set(listed[1].values())
    full = [sum(int(k.rsplit(":", 1)[1]) for k in m) for m in listed]
    assert uploaded[1] < full[1], "snapshot 1 re-uploaded a file it could list"
    assert sum(uploaded) < sum(full)
    manifests = store.manifests()
    assert sorted(manifests) == [2, 3]
    assert {f.name for f in sst_dir.iterdir()} == set(manifests[2].sst.values()) | set(manifests[3].sst.values()), \
        "cleanup left files no kept snapshot lists"
    # A restore from the incremental snapshot equals the fold; its first snapshot lists what it was restored from.
    shutil.rmtree(shard_dir(s, ckpt, 0))
    got = run_task(s, ckpt, 4, batches[4], NOW)
    assert got.restored_from == "snapshot" and got.outputs == expected[4]
    assert set(store.manifests()[3].sst.values()) & set(store.manifests()[4].sst.values())
    assert run_task(s, ckpt, 5, batches[5], NOW).outputs == expected[5]
    kept = store.manifests()
    assert sorted(kept) == [4, 5]
    assert {f.name for f in sst_dir.iterdir()} == {r for m in kept.values() for r in m.sst.values()}, \
        "cleanup left files no kept snapshot lists"


def test_a_snapshot_of_the_full_copy_layout_still_restores(settings: Settings, ckpt: str, tmp_path: Path) -> None:
    s = settings.model_copy(update={"snapshot_every": 1000, "snapshots_kept": 1})
    batches = [random_commands(100, 20, seed=i, start=i * 1000) for i in range(2)]
    expected = reference(batches, s)
    assert run_task(s, ckpt, 0, batches[0], NOW).outputs == expected[0]
    store = ShardStore(ckpt, 0)
    # The layout before incremental snapshots: the whole RocksDB checkpoint under snapshot/<batch>/, no files.json.
    import rocksdict

    db = rocksdict.Rdict(str(shard_dir(s, ckpt, 0)), rocksdict.Options(raw_mode=True))
    rocksdict.Checkpoint(db).create_checkpoint(str(tmp_path / "copy"))
    db.close()
    dest = Path(store.base) / "snapshot" / f"{0:020d}"
    shutil.copytree(tmp_path / "copy", dest)
    (Path(store.base) / "snapshot" / f"{0:020d}.done").write_bytes(b"")
    shutil.rmtree(shard_dir(s, ckpt, 0))
    got = run_task(s, ckpt, 1, batches[1], NOW)
    assert got.restored_from == "snapshot" and got.outputs == expected[1]


def held_run(settings: Settings, ckpt: str, batches: list[list[InputRecord]], now: int = NOW,
             first: int = 0) -> tuple[list[list[tuple]], list[bytes], dict[bytes, bytes]]:
    """Run ``batches`` on one shard held open throughout (as a shard server holds it); return the outputs, the
    changelog bytes and the database's contents. Checks after each batch that every cached state is what
    decoding its stored bytes gives."""
    shard = open_shard(shard_dir(settings, ckpt, 0), ShardStore(ckpt, 0), first, settings)
    outputs = []
    try:
        for b, batch in enumerate(batches, start=first):
            outputs.append(shard.run(b, batch, settings, now + b).outputs)
            assert_cache_matches_storage(shard)
        logs = [bytes(shard.db[b"m:log"])]
        contents = {bytes(k): bytes(v) for k, v in shard.db.items() if not bytes(k).startswith((b"m:lineage", b"m:seed"))}
    finally:
        shard.close()
    return outputs, logs, contents


def python_fold(settings: Settings) -> Settings:
    """Return ``settings`` deciding by the Python fold only: the state cache serves that path (the compiled core
    reads stored bytes, app.validator.rocks.core_step), so its tests count hits there."""
    return settings.model_copy(update={"core": "off"})


def assert_cache_matches_storage(shard: Shard) -> None:
    for key, written, state in shard.cache.items():
        raw = shard.db.get(STATE + key)
        assert raw is not None, f"{key!r} is cached but not stored"
        assert (written, state) == (int.from_bytes(raw[:8], "big"), codec.decode_state(raw[8:])), key


def test_state_cache_gives_the_bytes_of_decoding_every_state(settings: Settings, tmp_path: Path) -> None:
    batches = [random_commands(150, 12, seed=s, start=s * 1000) for s in range(6)]
    cold = settings.model_copy(update={"shard_state_cache_mb": 0})
    tiny = settings.model_copy(update={"shard_state_cache_mb": 1, "var_dir": tmp_path / "tiny"})
    runs = [held_run(s, str(tmp_path / name), batches) for s, name in ((cold, "cold"), (settings, "warm"), (tiny, "t"))]
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][0] == reference(batches, settings)


def test_state_cache_replay_and_restore_after_hits_give_the_same_bytes(settings: Settings, ckpt: str) -> None:
    settings = python_fold(settings)
    batches = [random_commands(100, 8, seed=s, start=s * 1000) for s in range(4)]
    expected = reference(batches, settings)
    shard = open_shard(shard_dir(settings, ckpt, 0), ShardStore(ckpt, 0), 0, settings)
    try:
        for b in range(3):
            assert shard.run(b, batches[b], settings, NOW).outputs == expected[b]
        assert shard.cache.hits > 0
        replay = shard.run(2, batches[2], settings, NOW + 5)  # a task retry of the last batch
        assert replay.replayed and replay.outputs == expected[2]
    finally:
        shard.close()
    shutil.rmtree(shard_dir(settings, ckpt, 0))  # lost: restored from the checkpoint, nothing cached
    restored = open_shard(shard_dir(settings, ckpt, 0), ShardStore(ckpt, 0), 3, settings)
    try:
        assert restored.restored_from == "empty" and len(restored.cache) == 0  # changelogs only, from batch 0
        assert restored.run(3, batches[3], settings, NOW).outputs == expected[3]
    finally:
        restored.close()


def test_state_cache_is_forgotten_when_a_changelog_is_applied(settings: Settings, tmp_path: Path) -> None:
    """A shard that catches up by changelogs must not decide against the states it had cached before."""
    settings = python_fold(settings)
    create = rec(CreateObject("c1", "o1", "alice", T0, document="{}"), 0)
    update = rec(UpdateObject("c2", "o1", "alice", T0, patch='{"a": 1}'), 1)
    after = rec(UpdateObject("c3", "o1", "alice", T0, expected_version=2, patch='{"a": 2}'), 2)
    ahead = open_shard(tmp_path / "ahead", ShardStore(str(tmp_path / "c1"), 0), 0, settings)
    behind = open_shard(tmp_path / "behind", ShardStore(str(tmp_path / "c2"), 0), 0, settings)
    try:
        for shard in (ahead, behind):
            shard.run(0, [create], settings, NOW)
        ahead.run(1, [update], settings, NOW)
        assert len(behind.cache) == 1  # o1 at version 1
        log, data = ShardStore(str(tmp_path / "c1"), 0).read_changelog(1, 0)
        behind.apply_changelog(log, data)  # o1 at version 2 in the database
        assert_cache_matches_storage(behind)
        got, want = behind.run(2, [after], settings, NOW), ahead.run(2, [after], settings, NOW)
        assert got.outputs == want.outputs
        assert codec.decode_outcome(got.outputs[0][2]).version == 3  # type: ignore[union-attr]
    finally:
        ahead.close()
        behind.close()


def test_state_cache_forgets_a_swept_tombstone(settings: Settings, ckpt: str) -> None:
    settings = python_fold(settings)
    s = settings.model_copy(update={"tombstone_ttl_ms": 1000})
    create = rec(CreateObject("c1", "o1", "alice", T0, document="{}"), 0)
    delete = rec(DeleteObject("c2", "o1", "alice", T0), 1)
    other = rec(CreateObject("c3", "o2", "alice", T0, document="{}"), 2)
    shard = open_shard(shard_dir(s, ckpt, 0), ShardStore(ckpt, 0), 0, s)
    try:
        shard.run(0, [create, delete], s, NOW)
        assert [k for k, _, _ in shard.cache.items()] == [b"o1"]
        shard.run(1, [other], s, NOW + 1001)  # sweeps o1's state
        assert shard.db.get(STATE + b"o1") is None
        assert_cache_matches_storage(shard)
    finally:
        shard.close()


def test_state_cache_hit_still_forgets_dedup_entries_after_their_ttl(settings: Settings, tmp_path: Path) -> None:
    settings = python_fold(settings)
    s = settings.model_copy(update={"dedup_ttl_ms": 1000})
    update = rec(UpdateObject("u1", "o1", "alice", T0, patch='{"a": 1}'), 1)
    batches = [[rec(CreateObject("c1", "o1", "alice", T0, document="{}"), 0), update],
               [InputRecord(update.key, update.value, TOPIC, 0, 2, update.signature)]]  # the same command, resent after the TTL
    outputs = []
    shard = open_shard(tmp_path / "warm", ShardStore(str(tmp_path / "c"), 0), 0, s)
    try:
        outputs.append(shard.run(0, batches[0], s, NOW).outputs)
        outputs.append(shard.run(1, batches[1], s, NOW + 1001).outputs)
        assert shard.cache.hits == 1
    finally:
        shard.close()
    cold_late = []
    shard = open_shard(tmp_path / "cold2", ShardStore(str(tmp_path / "c2"), 0), 0,
                       s.model_copy(update={"shard_state_cache_mb": 0}))
    try:
        cold_late.append(shard.run(0, batches[0], s, NOW).outputs)
        cold_late.append(shard.run(1, batches[1], s, NOW + 1001).outputs)
    finally:
        shard.close()
    assert outputs == cold_late
    assert codec.decode_outcome(outputs[1][0][2]).version == 3  # type: ignore[union-attr]  # decided afresh


def test_a_rerun_in_a_rescaled_generation_reemits_the_configured_source(settings: Settings, ckpt: str) -> None:
    """In generation 1 (app.rescale.generation.overlay: topic commands.g1) a re-run of an applied batch, as after a
    kill -9, must write the bytes of the first run, headers included: ce_source names the configured topic."""
    from app.rescale.generation import overlay
    from schemas.generations import Generation

    g1 = Generation(number=1, topic=settings.topic_commands + ".g1", partitions=1, checkpoint=ckpt)
    gen = overlay(settings, g1)
    batch = random_commands(30, 6, seed=11)
    first = run_task(gen, ckpt, 0, batch, NOW)
    again = run_task(gen, ckpt, 0, batch, NOW + 1)
    assert again.replayed and again.outputs == first.outputs
    sources = {dict(h)["ce_source"] for *_, h in first.outputs if h}
    assert sources == {f"/arbiter/topics/{settings.topic_commands}".encode()}, sources
