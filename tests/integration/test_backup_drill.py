"""The restore drill (issue 30): load through the real API, validator and projections; back up with everything
stopped; load more; destroy what the backup covers; restore; resume — the read model is byte for byte what it was
plus what came after, the validator knows every decision made after the backup, and the audit trail continues
and verifies."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from rocksdict import AccessType, Rdict

from app.backup.cut import create
from app.backup.restore import restore, verify_backup
from app.read_models import audit_root, read_model_root
from app.settings import Settings, checkpoint_uri
from app.validator.lock import FileLock, job_lock_path, rocks_root
from projections.audit import store as audit_store
from projections.audit import verify
from projections.db.store import ReadModelStore, current_generation, iter_offsets, options
from tests.integration.test_api_support import (
    api_client,
    audit_projection_running,
    auth,
    db_projection_running,
    decided,
    validator_running,
)

pytestmark = pytest.mark.integration
TP = tuple[str, int]


def _ends(s: Settings) -> dict[TP, int]:
    c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "drill-watermarks"})
    try:
        return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t in (s.topic_events, s.topic_rejections) for p in range(s.partitions)}
    finally:
        c.close()


def _secondary(path: Path) -> Any:  # noqa: ANN401 - a context manager over an Rdict
    @contextmanager
    def opened() -> Iterator[Rdict]:
        tmp = tempfile.mkdtemp(prefix="drill-")
        db = Rdict(str(path), options(), access_type=AccessType.secondary(tmp))
        db.try_catch_up_with_primary()
        try:
            yield db
        finally:
            db.close()
            shutil.rmtree(tmp, ignore_errors=True)
    return opened()


def _caught_up(s: Settings, timeout: float = 60.0) -> None:
    """Wait until the read model's and the audit store's offsets are the topics' ends (nothing left to apply)."""
    deadline = time.monotonic() + timeout
    while True:
        ends = _ends(s)
        gen = current_generation(read_model_root(s))
        with _secondary(gen) as rm, _secondary(audit_root(s)) as audit:  # type: ignore[arg-type]
            db = {tp: o for tp, o in iter_offsets(rm).items()}
            heads = {tp: h.next_offset for tp, h in audit_store.heads(audit).items()}
        behind = {tp: (db.get(tp, 0) if tp[0] == s.topic_events else None, heads.get(tp, 0), end)
                  for tp, end in ends.items() if end and (heads.get(tp, 0) < end or
                                                          (tp[0] == s.topic_events and db.get(tp, 0) < end))}
        if not behind:
            return
        assert time.monotonic() < deadline, f"projections behind (db, audit, end): {behind}"
        time.sleep(0.2)


@contextmanager
def _pipeline(spark: Any, s: Settings) -> Iterator[Any]:  # noqa: ANN401
    """The validator, the DB and audit projections and the API; on leaving, everything is caught up and stopped."""
    with ExitStack() as stack:
        stack.enter_context(validator_running(spark, s))
        stack.enter_context(db_projection_running(s))
        stack.enter_context(audit_projection_running(s))
        client = stack.enter_context(api_client(s))
        yield client
        _caught_up(s)
    # the query's watch lets go of the job lock a moment after the query stopped: until then a backup is refused
    lock, deadline = FileLock(job_lock_path(checkpoint_uri(s), rocks_root(s, checkpoint_uri(s)))), time.monotonic() + 30
    while not lock.try_acquire():
        assert time.monotonic() < deadline, "the stopped validator still holds its job lock"
        time.sleep(0.05)
    lock.release()


def _views(s: Settings) -> dict[str, bytes]:
    store = ReadModelStore.open_current(read_model_root(s))
    try:
        return {i: v.to_bytes() for i, v in store.views()}
    finally:
        store.close()


def test_restore_drill(spark: Any, settings: Settings, tmp_path: Path) -> None:  # noqa: ANN401
    # the lease (a Kafka group, tested in test_validator_lease) is not what is drilled here; the job lock still is
    s = settings.model_copy(update={"wait_max_s": 120.0, "validator_lease": False})
    alice = {**auth(s, "alice"), "Prefer": "wait=120"}
    ids = [f"drill-{n}" for n in range(6)]
    with _pipeline(spark, s) as api:
        for i in ids:
            decided(api.post("/objects", json={"id": i, "document": {"n": i}}, headers=alice), 201, '"1"')
        decided(api.patch(f"/objects/{ids[0]}", json={"x": 1}, headers={**alice, "If-Match": '"1"'}), 200, '"2"')
    backup = tmp_path / "backup"
    manifest = create(s, backup)
    assert verify_backup(backup).ok
    assert set(manifest["components"]) == {"read_model", "audit", "validator"}
    at_backup = _views(s)

    with _pipeline(spark, s) as api:  # what comes after the backup: the restore must bring it back from the topics
        decided(api.patch(f"/objects/{ids[1]}", json={"y": 2}, headers={**alice, "If-Match": '"1"'}), 200, '"2"')
        decided(api.delete(f"/objects/{ids[2]}", headers=alice), 204, '"2"')
        decided(api.post("/objects", json={"id": "drill-late", "document": {}}, headers=alice), 201, '"1"')
        refused = api.patch(f"/objects/{ids[3]}", json={"z": 3}, headers={**alice, "If-Match": '"7"'})
        assert refused.status_code == 412
    before_loss = _views(s)
    assert before_loss != at_backup and len(before_loss) == 7

    for path in (read_model_root(s), audit_root(s), Path(checkpoint_uri(s)), rocks_root(s, checkpoint_uri(s))):
        shutil.rmtree(path)
    restored = restore(s, backup)
    assert restored.ok and restored.checked == len(manifest["files"]), restored.problems
    assert _views(s) == at_backup

    with _pipeline(spark, s) as api:
        # the validator replayed the commands after its checkpoint: it knows ids[1] is at 2 and ids[2] is deleted
        decided(api.patch(f"/objects/{ids[1]}", json={"y": 3}, headers={**alice, "If-Match": '"2"'}), 200, '"3"')
        assert api.patch(f"/objects/{ids[2]}", json={}, headers=alice).status_code == 410
        assert api.post("/objects", json={"id": "drill-late", "document": {}}, headers=alice).status_code == 409
    after = _views(s)
    changed = {i for i in after if after[i] != before_loss.get(i)}
    assert changed == {ids[1]}, "the read model is not what it was before the loss plus what came after"
    assert b'"y":3' in after[ids[1]]
    report = verify(audit_root(s))
    assert report.ok, report.problems
    ends = _ends(s)
    # the chains continue: every record on the topics (duplicates of replayed batches too) is in them, no restart
    assert not report.restarts and {tp: n for tp, n in report.entries.items() if n} == {
        tp: end for tp, end in ends.items() if end}
