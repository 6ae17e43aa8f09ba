"""A shard's outputs and changelogs: 64-bit framing, bounded chunks, and state written by the 32-bit format still
restores (real rocksdict databases and checkpoint files, no Spark)."""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
import rocksdict
from hypothesis import given
from hypothesis import strategies as st

from app.settings import Settings
from app.validator.fold import OutputRecord
from app.validator.headers import ce_time
from app.validator.rocks import frames
from app.validator.rocks.checkpoint import MAGIC_V1, ShardStore, decode_changelog, fsync_dir
from app.validator.rocks.frames import decode_outputs, encode_outputs
from app.validator.rocks.memory import shard_options
from app.validator.rocks.shard import M_LOG, M_OUT, run_task, shard_dir
from app.validator.rocks.wire import HEADERS_TYPE, headers_array
from tests.unit.test_rocks_shard import NOW, random_commands, reference

pytestmark = pytest.mark.unit

_I = struct.Struct(">i")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(partitions=1, var_dir=tmp_path / "var", snapshot_every=1000, rocks_memory_mb=16,
                    rocks_write_buffer_mb=4)


def old_outputs(outputs: list[OutputRecord]) -> bytes:
    """The outputs framing of earlier versions: signed 32-bit lengths, no header."""
    parts = [_I.pack(len(outputs))]
    for topic, key, value, partition, _ in outputs:
        parts += [_I.pack(len(topic.encode())), topic.encode()]
        parts += [_I.pack(-1)] if key is None else [_I.pack(len(key)), key]
        parts += [_I.pack(len(value)), value, _I.pack(partition)]
    return b"".join(parts)


def old_changelog(batch_id: int, prev: int, entries: list[tuple[bytes, bytes | None]]) -> bytes:
    """The changelog format of earlier versions (ARBCL1: signed 32-bit entry lengths)."""
    parts = [MAGIC_V1, struct.pack(">qqI", batch_id, prev, len(entries))]
    for key, value in entries:
        parts += [_I.pack(len(key)), key]
        parts += [_I.pack(-1)] if value is None else [_I.pack(len(value)), value]
    body = b"".join(parts)
    return body + struct.pack(">I", zlib.crc32(body))


def v2_outputs(outputs: list[OutputRecord]) -> bytes:
    """The outputs framing before headers: OUTPUTS_V2, 64-bit lengths."""
    q = struct.Struct(">q").pack
    parts = [frames.OUTPUTS_V2, q(len(outputs))]
    for topic, key, value, partition, _ in outputs:
        parts += [q(len(topic.encode())), topic.encode()]
        parts += [q(-1)] if key is None else [q(len(key)), key]
        parts += [q(len(value)), value, _I.pack(partition)]
    return b"".join(parts)


def v4_outputs(outputs: list[OutputRecord]) -> bytes:
    """The outputs framing before trace context: OUTPUTS_V4, V2's layout, headers derived when read."""
    return frames.OUTPUTS_V4 + v2_outputs(outputs)[len(frames.OUTPUTS_V2):]


def v3_outputs(outputs: list[OutputRecord]) -> bytes:
    """The outputs framing that stored each record's headers: OUTPUTS_V3 (briefly written, still read)."""
    q = struct.Struct(">q").pack
    parts = [frames.OUTPUTS_V3, q(len(outputs))]
    for topic, key, value, partition, headers in outputs:
        parts += [q(len(topic.encode())), topic.encode()]
        parts += [q(-1)] if key is None else [q(len(key)), key]
        parts += [q(len(value)), value, _I.pack(partition), _I.pack(len(headers))]
        for name, data in headers:
            parts += [q(len(name.encode())), name.encode(), q(len(data)), data]
    return b"".join(parts)


def test_outputs_are_framed_with_64_bit_lengths_headers_derived_and_earlier_framings_still_read(
        settings: Settings) -> None:
    """Stored outputs keep no headers: they are derived from each value again, the same bytes (events, rejections,
    a record that never decoded: no subject, no time)."""
    outs = reference([random_commands(80, 10, seed=3)], settings)[0]
    assert {o[0] for o in outs} == {settings.topic_events, settings.topic_rejections, settings.parked_topic}
    assert any(dict(o[4]).get("ce_subject") is None for o in outs)  # the junk record's rejection
    data = encode_outputs(outs)
    assert data.startswith(frames.OUTPUTS_V5)
    assert struct.unpack_from(">q", data, len(frames.OUTPUTS_V5)) == (len(outs),)  # the count, then 8-byte lengths
    assert b"ce_id" not in data and b"application/avro" not in data  # no header is stored
    assert decode_outputs(data, settings.topic_commands) == outs
    assert decode_outputs(v3_outputs(outs), settings.topic_commands) == outs
    assert decode_outputs(v4_outputs(outs), settings.topic_commands) == outs  # these outputs carry no trace context
    headerless = [(t, k, v, p, ()) for t, k, v, p, _ in outs]  # what a version before headers wrote, and re-emits
    assert decode_outputs(v2_outputs(outs), settings.topic_commands) == headerless
    assert decode_outputs(old_outputs(outs), settings.topic_commands) == headerless
    assert decode_outputs(old_outputs([]), settings.topic_commands) == []


def test_large_outputs_are_stored_in_bounded_chunks_and_stale_chunks_are_deleted(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames, "CHUNK_BYTES", 1000)
    ckpt = str(tmp_path / "ckpt")
    batches = [random_commands(200, 30, seed=1), random_commands(5, 3, seed=2, start=1000)]
    expected = reference(batches, settings)
    first = run_task(settings, ckpt, 0, batches[0], NOW)
    assert first.outputs == expected[0]
    db = rocksdict.Rdict(str(shard_dir(settings, ckpt, 0)), shard_options(16, 4))
    try:
        chunks = [k for k in db.keys(from_key=M_OUT + b"/") if k.startswith(M_OUT + b"/")]
        assert len(chunks) > 10
        assert all(len(db[k]) <= 1000 for k in chunks)
        assert all(len(db[k]) <= 1000 for k in db.keys(from_key=M_LOG + b"/") if k.startswith(M_LOG + b"/"))
    finally:
        db.close()
    again = run_task(settings, ckpt, 0, batches[0], NOW)
    assert again.replayed and again.outputs == first.outputs
    assert run_task(settings, ckpt, 1, batches[1], NOW).outputs == expected[1]
    db = rocksdict.Rdict(str(shard_dir(settings, ckpt, 0)), shard_options(16, 4))
    try:
        left = [k for k in db.keys(from_key=M_OUT + b"/") if k.startswith(M_OUT + b"/")]
        assert len(left) == frames.chunk_count(db[M_OUT]) < len(chunks)  # the first batch's extra chunks are gone
    finally:
        db.close()
    shutil.rmtree(shard_dir(settings, ckpt, 0))  # restore from the changelogs, whose entries are chunks too
    assert run_task(settings, ckpt, 1, batches[1], NOW).replayed


def test_a_shard_and_changelogs_written_in_the_32_bit_format_still_restore_and_replay(
        settings: Settings, tmp_path: Path) -> None:
    ckpt = str(tmp_path / "ckpt")
    batches = [random_commands(80, 10, seed=i, start=i * 1000) for i in range(3)]
    expected = reference(batches, settings)
    for b in range(2):
        run_task(settings, ckpt, b, batches[b], NOW)
    # Rewrite what the checkpoint holds as earlier versions wrote it: ARBCL1 files, M_OUT one 32-bit-framed value.
    store = ShardStore(ckpt, 0)
    for b, prev in store.changelogs().items():
        path = store._changelog_path(b, prev)
        log = decode_changelog(Path(path).read_bytes())
        entries = [(k, v) for k, v in log.entries if not k.startswith(M_OUT)]
        entries.append((M_OUT, old_outputs(expected[b])))
        Path(path).write_bytes(old_changelog(log.batch_id, log.prev, entries))
    shutil.rmtree(shard_dir(settings, ckpt, 0))
    replayed = run_task(settings, ckpt, 1, batches[1], NOW)  # restored from the old changelogs, then re-emitted
    assert replayed.restored_from == "empty"  # no snapshot: the local copy is rebuilt from the changelogs alone
    headerless = [(t, k, v, p, ()) for t, k, v, p, _ in expected[1]]  # as the version before headers wrote them
    assert replayed.replayed and replayed.outputs == headerless
    # A local database whose memo is an old, unchunked value re-emits it too.
    db = rocksdict.Rdict(str(shard_dir(settings, ckpt, 0)), shard_options(16, 4))
    try:
        assert db[M_OUT] == old_outputs(expected[1])
        db[M_LOG] = old_changelog(1, 0, [])
    finally:
        db.close()
    assert run_task(settings, ckpt, 1, batches[1], NOW).outputs == headerless
    assert run_task(settings, ckpt, 2, batches[2], NOW).outputs == expected[2]  # a new batch: headers


def test_a_changelog_rename_is_followed_by_an_fsync_of_its_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[tuple[int, int, bool]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino, os.path.isdir(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    store = ShardStore(str(tmp_path / "ckpt"), 0)
    store.put_changelog(old_changelog(0, -1, [(b"s:a", b"1")]))
    (b, prev), = store.changelogs().items()
    directory = os.stat(Path(store._changelog_path(b, prev)).parent)
    assert (directory.st_dev, directory.st_ino, True) in synced
    assert synced[-1][2], "the directory is synced after the file (the rename comes between)"
    fsync_dir(str(tmp_path))  # a plain directory can be synced on this filesystem


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 2000])
def test_a_value_at_and_past_a_chunk_boundary_round_trips_in_the_fewest_chunks(size: int) -> None:
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    writes = frames.chunk_entries(b"m:out", data, None, chunk=1000)
    stored = {k: v for k, v in writes if v is not None}
    parts = [v for k, v in writes if k != b"m:out"]
    assert len(parts) == (size + 999) // 1000 and all(len(p) <= 1000 for p in parts)
    assert frames.read_chunked(stored.get, b"m:out") == data


_HEADER_ROWS = st.lists(st.lists(st.tuples(st.sampled_from(["ce_id", "ce_type", "ce_time", "content-type", "é"]),
                                           st.binary(max_size=40)), max_size=8).map(tuple), max_size=30)


@given(_HEADER_ROWS)
def test_headers_built_column_wise_are_what_pa_array_builds(rows: list[tuple[tuple[str, bytes], ...]]) -> None:
    """``wire.headers_array`` (flat columns and offsets) is the same Arrow array as ``pa.array`` over the rows."""
    built = headers_array(rows)
    assert built.type == HEADERS_TYPE
    assert built.equals(pa.array(rows, HEADERS_TYPE))
    assert built.to_pylist() == [[{"key": k, "value": v} for k, v in row] for row in rows]


@given(st.datetimes(min_value=datetime(1000, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
                    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7))])))
def test_ce_time_is_rfc3339_utc_with_microseconds(at: datetime) -> None:
    assert ce_time(at) == at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
