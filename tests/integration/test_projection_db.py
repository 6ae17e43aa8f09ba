"""The read-model contract, run over both backends (RocksDB and PostgreSQL) against the real broker: SIGKILL
mid-stream then restart equals the exact fold, replayed batches change nothing, a rebuild equals the live model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from app.read_models import open_reader, open_writer, read_model_root, rebuild_target
from app.settings import Settings
from bench.projections.workload import decisions, encoded, produce
from commands import Event, merge_patch
from projections.db import DbProjection
from projections.rebuild import rebuild_read_model
from projections.runner import Runner, RunnerConfig
from tests.conftest import READ_MODELS

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("read_model_settings", READ_MODELS, indirect=True)]


#: (document, version, deleted, owner, editors, readers): everything a read is answered from.
Fold = dict[str, tuple[dict[str, Any], int, bool, str, tuple[str, ...], tuple[str, ...]]]


def fold(events: list[Event]) -> Fold:
    """Apply every event exactly once, written independently of projections.db.apply."""
    out: Fold = {}
    for ev in events:
        doc, version, deleted, owner, editors, readers = out.get(ev.object_id, ({}, 0, False, "", (), ()))
        if ev.version != version + 1:
            continue
        owner = ev.owner
        if ev.type == "CREATED":
            doc = json.loads(ev.document or "")
        elif ev.type == "UPDATED":
            doc = merge_patch(doc, json.loads(ev.patch or ""))
        elif ev.type == "DELETED":
            doc, deleted = {}, True
        elif ev.type == "EDITOR_GRANTED":
            editors = (*editors, ev.editor or "")
        elif ev.type == "EDITOR_REVOKED":
            editors = tuple(e for e in editors if e != ev.editor)
        elif ev.type == "READER_GRANTED":
            readers = (*readers, ev.reader or "")
        elif ev.type == "READER_REVOKED":
            readers = tuple(r for r in readers if r != ev.reader)
        out[ev.object_id] = (doc, ev.version, deleted, owner, editors, readers)
    return out


def snapshot(s: Settings) -> Fold:
    rm = open_reader(s)
    try:
        return {oid: (v.document, v.version, v.deleted, v.owner, v.editors, v.readers) for oid, v in rm.views()}
    finally:
        rm.close()


def stored_offsets(s: Settings) -> dict[tuple[str, int], int]:
    store = open_writer(s)
    try:
        return store.offsets()
    finally:
        store.close()


def leftovers(s: Settings) -> list[str]:
    """Every generation (RocksDB directories) or schema (PostgreSQL) of the read model that exists now."""
    if s.read_model == "rocksdb":
        return sorted(p.name for p in read_model_root(s).glob("gen-*"))
    import psycopg

    assert s.postgres_dsn is not None
    with psycopg.connect(s.postgres_dsn.get_secret_value()) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s ORDER BY 1",
                            (f"{s.postgres_schema}%",)).fetchall()
    return [r[0] for r in rows]


def _env(s: Settings, **extra: str) -> dict[str, str]:
    env = {**os.environ, "ARBITER_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "ARBITER_TOPIC_EVENTS": s.topic_events,
           "ARBITER_TOPIC_REJECTIONS": s.topic_rejections, "ARBITER_VAR_DIR": str(s.var_dir),
           "ARBITER_READ_MODEL": s.read_model, **extra}
    if s.postgres_dsn is not None:
        env["ARBITER_POSTGRES_DSN"] = s.postgres_dsn.get_secret_value()
    return env


CLI = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]


def test_sigkill_mid_stream_then_restart_applies_every_event_exactly_once(read_model_settings: Settings) -> None:
    s = read_model_settings
    outcomes = decisions(n_objects=150, n_commands=4000, seed=11)
    events = [o for o in outcomes if isinstance(o, Event)]
    records = encoded(outcomes, s.partitions)
    produce(s.kafka_bootstrap, s.topic_events, s.topic_rejections, records)
    env = _env(s, ARBITER_PROJECTION_BATCH_SIZE="10", ARBITER_PROJECTION_GROUP_PREFIX="t-kill")

    proc = subprocess.Popen([*CLI, "project", "db"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    reader = open_reader(s)
    try:
        done = 0
        deadline = time.monotonic() + 60
        while done < len(events) // 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            done = sum(v.version for _, v in reader.views()) if reader.ready() else 0
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        reader.close()
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    consumed = sum(stored_offsets(s).values())
    assert 0 < consumed < len(events), "the kill must land mid-stream"

    # A replayed Spark micro-batch: byte-identical records written again, after the originals.
    replay = [r for r in records if r[0]][len(events) // 3: len(events) // 3 + 300]
    produce(s.kafka_bootstrap, s.topic_events, s.topic_rejections, replay)

    rerun = subprocess.run([*CLI, "project", "db", "--until-caught-up"], env=env, capture_output=True, text=True,
                           timeout=90, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert f"read model on {s.read_model}" in rerun.stderr
    assert "duplicates 300, gaps 0, invalid 0" in rerun.stderr, rerun.stderr
    assert snapshot(s) == fold(events)
    rm = open_reader(s)
    try:
        assert rm.gaps() == {}
        some = events[-1].object_id
        view = rm.get(some)
        assert view is not None and view.version == fold(events)[some][1]
        assert rm.get("never-created") is None
    finally:
        rm.close()


def _config(s: Settings, group: str) -> RunnerConfig:
    return RunnerConfig(bootstrap=s.kafka_bootstrap, topics=(s.topic_events,), group_id=group,
                        batch_size=500, stop_when_caught_up=True, lag_interval_s=60)


def test_duplicates_change_nothing_and_rebuild_matches_live(read_model_settings: Settings) -> None:
    s = read_model_settings.model_copy(update={"projection_sync_writes": False})
    outcomes = decisions(n_objects=100, n_commands=2000, seed=5)
    events = [o for o in outcomes if isinstance(o, Event)]
    records = [r for r in encoded(outcomes, s.partitions) if r[0]]
    produce(s.kafka_bootstrap, s.topic_events, s.topic_rejections, records)

    live = DbProjection(open_writer(s))
    Runner(_config(s, "t-live"), live).run()
    assert live.counts.applied == len(events) and live.counts.stale == 0
    before = snapshot(s)
    assert before == fold(events)
    rm = open_reader(s)
    raw_before = {k: v.to_bytes() for k, v in rm.views()}

    produce(s.kafka_bootstrap, s.topic_events, s.topic_rejections, records[: len(records) // 2])
    again = DbProjection(open_writer(s))
    stats = Runner(_config(s, "t-live"), again).run()
    assert stats.records == len(records) // 2, "a restart reads only what is new, from the stored offsets"
    assert (again.counts.applied, again.counts.stale) == (0, len(records) // 2)
    assert {k: v.to_bytes() for k, v in rm.views()} == raw_before
    (generation_before,) = leftovers(s)

    # A live projection holding the current store while the rebuild runs: it follows the swap.
    holder = DbProjection(open_writer(s))
    result = rebuild_read_model(_config(s, "t-db"), rebuild_target(s))
    assert result.stats.records == len(records) + len(records) // 2
    assert snapshot(s) == before
    assert {k: v.to_bytes() for k, v in rm.views()} == raw_before, "a reader opened before the swap follows it"
    offsets = holder.reseek()
    assert offsets is not None and sum(offsets.values()) == len(records) + len(records) // 2
    (generation_after,) = leftovers(s)  # the old generation or schema is gone
    if s.read_model == "rocksdb":
        assert generation_after != generation_before
    holder.close()
    rm.close()


def _freeze_events(oid: str) -> tuple[list[Event], list[Event]]:
    """Issue 24's reproduction: create, grant reader bob, grant editor eve, eve's patch with U+0000 (as a validator
    before the rule accepted it, or another producer wrote it), revoke bob, update; then the owner's delete."""
    from dataclasses import replace as with_fields
    from datetime import UTC, datetime

    from commands import CreateObject, DeleteObject, GrantEditor, GrantReader, RevokeReader, UpdateObject, decide

    at = datetime(2026, 1, 1, tzinfo=UTC)
    cmds = [CreateObject("f1", oid, "alice", at, document='{"n": 1}'), GrantReader("f2", oid, "alice", at, reader="bob"),
            GrantEditor("f3", oid, "alice", at, editor="eve"), UpdateObject("f4", oid, "eve", at, patch='{"n": 2}'),
            RevokeReader("f5", oid, "alice", at, reader="bob"), UpdateObject("f6", oid, "alice", at, patch='{"m": 3}'),
            DeleteObject("f7", oid, "alice", at)]
    state, events = None, []
    for c in cmds:
        d = decide(state, c)
        assert isinstance(d.outcome, Event), d.outcome
        state, events = d.state, [*events, d.outcome]
    events[3] = with_fields(events[3], patch='{"n": "a\\u0000b"}')
    return events[:6], events[6:]


def test_a_document_no_backend_may_hold_freezes_nothing_live_or_rebuilt(read_model_settings: Settings) -> None:
    """Roles and the deletion land after an event whose document cannot be applied; reads fail closed meanwhile."""
    from app.api.callers.identity import dev_token
    from app.api.main import create_app
    from tests.integration.test_api_support import TestClient

    s = read_model_settings
    before_delete, delete = _freeze_events("frozen")

    def run() -> DbProjection:
        projection = DbProjection(open_writer(s))
        Runner(_config(s, "t-freeze"), projection).run()
        return projection

    def read(principal: str) -> tuple[int, str]:
        token = dev_token(s, principal, ttl_s=60)
        with TestClient(create_app(s)) as client:  # the app opens its own reader, as `arbiter api` does
            r = client.get("/objects/frozen", headers={"Authorization": f"Bearer {token}"})
        return r.status_code, r.json()["code"] if r.status_code != 200 else "OK"

    produce(s.kafka_bootstrap, s.topic_events, s.topic_rejections, encoded(before_delete, s.partitions))
    assert run().counts.invalid == 1
    assert read("bob") == (404, "NOT_FOUND"), "the revoke landed after the unappliable patch"
    assert read("alice") == (503, "DOCUMENT_QUARANTINED"), "the document misses eve's patch: never served"
    produce(s.kafka_bootstrap, s.topic_events, s.topic_rejections, encoded(delete, s.partitions))
    run()
    expected = fold(before_delete + delete)["frozen"][1:]  # everything but the document, which is {} once deleted
    assert snapshot(s)["frozen"][1:] == expected == (7, True, "alice", ("eve",), ())
    assert read("alice") == (410, "DELETED")
    with open_reader(s) as rm:
        gap = json.loads(rm.gaps()["frozen"])
    assert gap["status"] == "INVALID" and "U+0000" in gap["detail"] and gap["version"] == 4

    rebuilt = subprocess.run([*CLI, "project", "db", "--rebuild"], env=_env(s), capture_output=True, text=True,
                             timeout=120, check=False)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "1 invalid" in rebuilt.stdout, rebuilt.stdout
    assert snapshot(s)["frozen"][1:] == expected
    assert read("alice") == (410, "DELETED") and read("bob") == (404, "NOT_FOUND")
