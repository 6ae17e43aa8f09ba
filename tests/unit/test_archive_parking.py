"""Parked records (envelope, fold, the rocksdb shard's replay), redrive ids, and reading the archive's sink log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.archive.columns import decoded
from app.limits import MESSAGE_CHARS, PARKED_MARGIN_BYTES
from app.parked.lot import Ledger, ParkedEntry, ParkedNotRedrivable, origin_of, redrive_record
from app.settings import Settings
from app.validator.fold import InputRecord, fold
from app.validator.murmur2 import partition_for
from app.validator.rocks.shard import run_task
from commands import CreateObject
from commands.ids import redrive_command_id
from projections import archived
from schemas import codec, parked

pytestmark = pytest.mark.unit

AT = datetime(2025, 1, 1, tzinfo=UTC)
S = Settings(partitions=1, topic_events="ev", topic_rejections="rj", topic_commands="cmd", max_message_bytes=64 * 1024)
CREATE = CreateObject("c1", "obj", "alice", AT, document="{}")


def test_the_envelope_round_trips_and_refuses_what_it_is_not() -> None:
    p = parked.Parked("cmd", 3, 2**40, "MALFORMED", "rid", b"k", None, b"\x00" * 10)
    assert parked.decode(parked.encode(p)) == p
    assert parked.decode(parked.encode(p)).where == "cmd[3]@1099511627776"
    for bad in (b"", b"APK1\x00", parked.encode(p)[:-1], parked.encode(p) + b"x", codec.encode_command(CREATE)):
        with pytest.raises(parked.ParkedFormatError):
            parked.decode(bad)


def _records() -> list[InputRecord]:
    return [InputRecord(b"obj", codec.encode_command(CREATE), "cmd", 0, 0, b"sig"),
            InputRecord(b"obj", b"\xff" * 5000, "cmd", 0, 1, b"sig"),          # MALFORMED: parked
            InputRecord(b"obj", None, "cmd", 0, 2),                            # no value: parked
            InputRecord(b"other", codec.encode_command(CREATE), "cmd", 0, 3)]  # key is not the id: MALFORMED, parked


def test_fold_parks_the_whole_bytes_of_what_did_not_decode_and_points_there() -> None:
    s = S.model_copy(update={"allow_unsigned_commands": True})
    runs = []
    for _ in range(2):
        copies: list = []
        out, _, _ = fold(lambda: None, _records(), s, parked=copies)
        runs.append((out, copies))
    assert runs[0] == runs[1]  # a replayed batch writes the same bytes
    out, copies = runs[0]
    assert len(out) == 4 and [c[0] for c in copies] == ["cmd-parked"] * 3
    got = [parked.decode(c[2]) for c in copies]
    assert [(p.offset, p.key, p.value, p.signature) for p in got] == [
        (1, b"obj", b"\xff" * 5000, b"sig"), (2, b"obj", None, None), (3, b"other", codec.encode_command(CREATE), None)]
    rejections = [codec.decode_rejection(o[2]) for o in out[1:]]
    assert [r.rejection_id for r in rejections] == [p.rejection_id for p in got]
    assert all(r.message.endswith("[full bytes parked in cmd-parked[0]]") and len(r.message) <= MESSAGE_CHARS
               for r in rejections)
    # without a list (a caller that does not park) the outputs are unchanged but for the pointer
    assert len(fold(lambda: None, _records(), s)[0]) == 4


def test_a_record_too_large_for_the_parked_topic_is_said_so_and_not_parked() -> None:
    s = S.model_copy(update={"allow_unsigned_commands": True})
    copies: list = []
    huge = InputRecord(b"obj", b"\xff" * (s.max_message_bytes + PARKED_MARGIN_BYTES), "cmd", 0, 0)
    out, _, _ = fold(lambda: None, [huge], s, parked=copies)
    assert copies == [] and "[not parked:" in codec.decode_rejection(out[0][2]).message


def test_the_rocksdb_shard_replays_parked_records_byte_for_byte(tmp_path: Path) -> None:
    s = S.model_copy(update={"var_dir": tmp_path / "var", "snapshot_every": 1000, "rocks_memory_mb": 16,
                             "rocks_write_buffer_mb": 4, "allow_unsigned_commands": True})
    assert partition_for(b"obj", 1) == 0
    ckpt = str(tmp_path / "ckpt")
    records = _records()[:3]
    first = run_task(s, ckpt, 0, records, now_ms=1)
    again = run_task(s, ckpt, 0, records, now_ms=1)  # Spark retries batch 0: the shard re-emits what it wrote
    assert not first.replayed and again.replayed
    assert first.outputs == again.outputs
    assert [o[0] for o in first.outputs] == ["ev", "rj", "rj", "cmd-parked", "cmd-parked"]
    assert first.outputs[-1][4] == ()


def test_a_redrive_gets_the_command_id_of_its_origin_and_refuses_undecodable_bytes() -> None:
    entry = ParkedEntry(parked.Parked("cmd", 2, 7, "MALFORMED", "rid", b"obj", b"sig", b"\xff", "valid"), (2, 0))
    with pytest.raises(ParkedNotRedrivable):
        redrive_record(entry, None, None)  # genuine, but no command
    key, value, command_id = redrive_record(entry, codec.encode_command(CREATE), None)
    assert key == b"obj" and command_id == redrive_command_id("cmd", 2, 7) != CREATE.command_id
    assert codec.decode_command(value).command_id == command_id
    assert redrive_record(entry, codec.encode_command(CREATE), None)[1] == value  # twice: the same command
    assert origin_of("commands-x[3]@12") == ("commands-x", 3, 12)


def _log(meta: Path, batch: int, entries: list[dict], compact: bool = False) -> None:
    meta.mkdir(parents=True, exist_ok=True)
    name = f"{batch}.compact" if compact else str(batch)
    (meta / name).write_text("v1\n" + "\n".join(json.dumps(e) for e in entries))


def test_readers_list_committed_files_through_the_sink_log_and_the_compaction_manifests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = tmp_path / "stream"
    meta = stream / "_spark_metadata"
    f = {n: stream / "topic=t" / "date=2025-01-01" / f"part-{n}.parquet" for n in "abcd"}
    _log(meta, 8, [{"path": f"file://{f['d']}", "action": "add"}])  # folded into the compact below
    _log(meta, 9, [{"path": f"file://{f['a']}", "action": "add"}, {"path": f"file://{f['b']}", "action": "add"}],
         compact=True)
    _log(meta, 10, [{"path": f"file://{f['c']}", "action": "add"}, {"path": f"file://{f['b']}", "action": "delete"}])
    (meta / ".11.tmp").write_text("v1\n{}")  # an unfinished entry
    assert archived.sink_log(stream) == [f["a"], f["c"]]  # part-d was never committed
    man = tmp_path / "compacted" / "_manifests"
    man.mkdir(parents=True)
    (man / "t.json").write_text(json.dumps({"topic": "t", "date": "2025-01-01",
                                            "sources": ["stream/topic=t/date=2025-01-01/part-a.parquet"],
                                            "files": ["compacted/topic=t/date=2025-01-01/x/part-0.parquet"]}))
    assert archived.files(tmp_path) == [f["c"], tmp_path / "compacted/topic=t/date=2025-01-01/x/part-0.parquet"]
    # the default root is relative (var/archive) while the sink log names absolute paths: the same files
    monkeypatch.chdir(tmp_path.parent)
    assert archived.files(Path(tmp_path.name)) == archived.files(tmp_path)
    assert archived.partition_values(f["c"]) == {"topic": "t", "date": "2025-01-01"}


def test_the_archive_must_run_from_offset_zero_without_a_hole() -> None:
    assert archived.ends([0, 0, 1], [0, 1, 0], "ev") == {0: 2, 1: 1}
    with pytest.raises(archived.ArchiveGap, match="jumps from offset 0 to 2"):
        archived.ends([0, 0], [0, 2], "ev")
    with pytest.raises(archived.ArchiveGap):
        archived.ends([0], [5], "ev")


def test_decoded_columns_and_raw_only_for_undecodable_bytes() -> None:
    row = decoded("command", codec.encode_command(CREATE))
    assert (row["object_id"], row["type"], row["principal"], row["command_id"], row["decode_error"]) == (
        "obj", "CreateObject", "alice", "c1", None)
    assert row["time_us"] == int(AT.timestamp()) * 1_000_000
    bad = decoded("event", b"\xff")
    assert bad["decode_error"] and all(bad[c] is None for c in ("object_id", "type", "version", "principal"))
    p = decoded("parked", parked.encode(parked.Parked("cmd", 0, 1, "MALFORMED", "rid", b"obj", None, b"x")))
    assert (p["object_id"], p["reason"], p["record_id"]) == ("obj", "MALFORMED", "rid")


def test_the_ledger_folds_the_parked_topic_and_its_log_in_any_order_and_may_keep_no_bytes() -> None:
    env = {o: parked.encode(parked.Parked("cmd", 0, o, "MALFORMED", f"r{o}", b"obj", b"sig", b"\xff" * (o + 1)))
           for o in range(3)}
    log = [json.dumps({"action": a, "origin": f"cmd[0]@{o}"}).encode() for a, o in (("redrive", 0), ("discard", 1))]
    for keep in (True, False):
        ledger = Ledger(keep_bytes=keep)
        ledger.add_action(log[0])  # the status page reads both topics at once: a redrive may come first
        ledger.add_parked(0, 10, env[0])
        ledger.add_parked(0, 11, env[1])
        ledger.add_parked(0, 12, env[1])  # a replayed batch's identical copy
        ledger.add_action(log[1])
        ledger.add_parked(0, 13, env[2])
        ledger.add_parked(0, 14, b"not an envelope")
        ledger.add_action(b"{not json")
        assert ledger.counts() == {"parked": 1, "redriven": 1, "discarded": 1}, keep
        rows = [e.summary() for e in ledger.entries.values()]
        assert [(r["origin"], r["status"], r["parked_at"], r["value_bytes"], r["copies"]) for r in rows] == [
            ("cmd[0]@0", "redriven", "[0]@10", 1, 1), ("cmd[0]@1", "discarded", "[0]@11", 2, 2),
            ("cmd[0]@2", "parked", "[0]@13", 3, 1)], keep
        assert all((e.record.value is not None) == keep for e in ledger.entries.values())
