"""Backup and restore (issue 30) on real RocksDB stores and a Spark checkpoint's layout on disk, no broker: the cut
refuses while a writer runs, the manifest holds each component's offsets and hashes, verify catches a changed
byte, and a restore into a destroyed var/ gives the same stores back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.backup.cut import BackupRefused, create
from app.backup.manifest import BackupInvalid
from app.backup.restore import restore, verify_backup, verify_restored
from app.cli import main
from app.read_models import audit_root, read_model_root
from app.settings import Settings, checkpoint_uri, get_settings
from app.validator.lock import FileLock, job_lock_path, rocks_root
from projections.audit import AuditProjection, verify
from projections.db import DbProjection
from projections.db.store import ReadModelStore
from projections.db.view import ObjectView
from projections.runner import Item, Record

pytestmark = pytest.mark.unit


def _var(s: Settings) -> None:
    """A read model, an audit store and a validator checkpoint as the running pipeline leaves them."""
    rm = ReadModelStore.open_current(read_model_root(s))
    rm.write({"o1": ObjectView({"a": 1}, 2, owner="alice")}, {(s.topic_events, 0): 7, (s.topic_events, 1): 3})
    rm.close()
    audit = AuditProjection(audit_root(s))
    audit.apply([Item(Record(s.topic_events, 0, o, b"o1", b"v%d" % o, o), None, "x") for o in range(3)])
    audit.close()
    ck = Path(checkpoint_uri(s))
    for batch, offsets in ((0, {"0": 2, "1": 0}), (1, {"0": 5, "1": 1})):
        (ck / "offsets").mkdir(parents=True, exist_ok=True)
        (ck / "offsets" / str(batch)).write_text(f'v1\n{{"batchTimestampMs":{batch}}}\n'
                                                 + json.dumps({s.topic_commands: offsets}))
        (ck / "commits").mkdir(exist_ok=True)
        (ck / "commits" / str(batch)).write_text("v1\n{}")
    (ck / "rocks" / "shard-0000" / "changelog").mkdir(parents=True)
    (ck / "rocks" / "shard-0000" / "changelog" / "1.1.bin").write_bytes(b"changes")
    (rocks_root(s, checkpoint_uri(s)) / "shard-0000").mkdir(parents=True)  # the local cache


def test_backup_is_refused_while_a_writer_runs_then_cut_verified_and_restored(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    _var(s)
    running = AuditProjection(audit_root(s))
    lock = FileLock(job_lock_path(checkpoint_uri(s), tmp_path))
    assert lock.try_acquire()
    try:
        with pytest.raises(BackupRefused, match="the audit projection .* the validator"):
            create(s, tmp_path / "b0")
    finally:
        running.close()
        lock.release()

    manifest = create(s, tmp_path / "b1")
    parts = manifest["components"]
    assert parts["read_model"]["offsets"] == {f"{s.topic_events}[0]": 7, f"{s.topic_events}[1]": 3}
    assert parts["audit"]["offsets"] == {f"{s.topic_events}[0]": 3}
    assert parts["validator"] == {"backend": s.state_backend, "batch": 1,
                                  "offsets": {f"{s.topic_commands}[0]": 5, f"{s.topic_commands}[1]": 1}}
    assert {f["path"] for f in manifest["files"]} >= {"validator/rocks/shard-0000/changelog/1.1.bin",
                                                      "read_model/current/CURRENT", "audit/CURRENT"}
    assert verify_backup(tmp_path / "b1").ok

    shutil.copytree(tmp_path / "b1", tmp_path / "b2")
    sst = next((tmp_path / "b2" / "audit").glob("*.sst"))
    raw = bytearray(sst.read_bytes())
    raw[len(raw) // 2] ^= 1
    sst.write_bytes(bytes(raw))
    bad = verify_backup(tmp_path / "b2")
    assert [p.split(":")[0] for p in bad.problems] == [f"audit/{sst.name}"]
    with pytest.raises(BackupInvalid):
        restore(s, tmp_path / "b2")

    shutil.rmtree(s.path(s.var_dir))
    result = restore(s, tmp_path / "b1")
    assert result.ok and result.checked == len(manifest["files"]), result.problems
    assert verify_restored(s, tmp_path / "b1").ok
    (rocks_root(s, checkpoint_uri(s)) / "shard-0000").mkdir(parents=True)  # restored over a var/ that has one
    assert restore(s, tmp_path / "b1").ok
    assert not rocks_root(s, checkpoint_uri(s)).exists(), "the shard cache would be ahead of the checkpoint"
    rm = ReadModelStore.open_current(read_model_root(s))
    assert dict(rm.views()) == {"o1": ObjectView({"a": 1}, 2, owner="alice")}
    assert rm.offsets() == {(s.topic_events, 0): 7, (s.topic_events, 1): 3}
    rm.close()
    assert verify(audit_root(s)).ok
    with pytest.raises(BackupRefused, match="other settings"):
        restore(s.model_copy(update={"partitions": 3}), tmp_path / "b1")


def test_the_cli_refuses_naming_the_running_writer_and_exits_0_when_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``arbiter backup …`` and ``arbiter erase`` as an operator runs them (``main`` with argv, settings from the
    environment): exit 2 with the code and the running component named, 0 once it is stopped."""
    s = Settings(var_dir=tmp_path / "var")
    _var(s)
    monkeypatch.setenv("ARBITER_VAR_DIR", str(s.var_dir))
    get_settings.cache_clear()
    backup = str(tmp_path / "b")
    try:
        running = DbProjection(ReadModelStore.open_current(read_model_root(s)))
        try:
            assert main(["backup", "create", backup]) == 2
            err = capsys.readouterr().err
            assert "arbiter: error [BACKUP_REFUSED]" in err and "these run: the DB projection (" in err, err
            assert "the audit projection" not in err and "the validator" not in err, err
            assert not Path(backup).exists(), "a refused backup leaves nothing behind"
            # o1 is live: the audit trail says so before the running writer is looked at (erase_view's own
            # READ_MODEL_BUSY: tests/unit/test_erasure.py)
            assert main(["erase", "o1"]) == 2 and "[ERASE_NOT_DELETED]" in capsys.readouterr().err
        finally:
            running.close()
        assert main(["erase", "o1"]) == 2 and "[ERASE_NOT_DELETED]" in capsys.readouterr().err
        assert main(["backup", "create", backup]) == 0 and "backup written to" in capsys.readouterr().out
        assert main(["backup", "verify", backup]) == 0 and "backup matches its manifest" in capsys.readouterr().out
        shutil.rmtree(s.path(s.var_dir))
        assert main(["backup", "restore", backup]) == 0 and "all match" in capsys.readouterr().out
        assert main(["backup", "verify", "--restored", backup]) == 0
    finally:
        get_settings.cache_clear()
