"""The DB projection against the real broker: SIGKILL mid-stream, replayed batches, and a rebuild."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from bench.projections.workload import decisions, encoded, produce
from commands import Event, merge_patch
from projections.db import DbProjection, ReadModel, ReadModelStore
from projections.db.store import current_generation
from projections.rebuild import rebuild_read_model
from projections.runner import Runner, RunnerConfig

pytestmark = pytest.mark.integration


def fold(events: list[Event]) -> dict[str, tuple[dict[str, Any], int, bool]]:
    """Apply every event exactly once, written independently of projections.db.apply."""
    out: dict[str, tuple[dict[str, Any], int, bool]] = {}
    for ev in events:
        doc, version, deleted = out.get(ev.object_id, ({}, 0, False))
        if ev.version != version + 1:
            continue
        if ev.type == "CREATED":
            doc = json.loads(ev.document or "")
        elif ev.type == "UPDATED":
            doc = merge_patch(doc, json.loads(ev.patch or ""))
        elif ev.type == "DELETED":
            doc, deleted = {}, True
        out[ev.object_id] = (doc, ev.version, deleted)
    return out


def snapshot(root: Path) -> dict[str, tuple[dict[str, Any], int, bool]]:
    with ReadModel(root) as rm:
        return {oid: (v.document, v.version, v.deleted) for oid, v in rm.views()}


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    return {**os.environ, "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap, "ARBITER_TOPIC_EVENTS": settings.topic_events,
            "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections, "ARBITER_VAR_DIR": str(settings.var_dir), **extra}


CLI = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]


def test_sigkill_mid_stream_then_restart_applies_every_event_exactly_once(settings: Settings) -> None:
    outcomes = decisions(n_objects=150, n_commands=4000, seed=11)
    events = [o for o in outcomes if isinstance(o, Event)]
    records = encoded(outcomes, settings.partitions)
    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections, records)
    root = settings.var_dir / "read_model"
    env = _env(settings, ARBITER_PROJECTION_BATCH_SIZE="10", ARBITER_PROJECTION_GROUP_PREFIX="t-kill")

    proc = subprocess.Popen([*CLI, "project", "db"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        done = 0
        deadline = time.monotonic() + 60
        while done < len(events) // 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
            done = sum(v[1] for v in snapshot(root).values()) if current_generation(root) else 0
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    store = ReadModelStore(current_generation(root))  # type: ignore[arg-type]
    consumed = sum(store.offsets().values())
    store.close()
    assert 0 < consumed < len(events), "the kill must land mid-stream"

    # A replayed Spark micro-batch: byte-identical records written again, after the originals.
    replay = [r for r in records if r[0]][len(events) // 3: len(events) // 3 + 300]
    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections, replay)

    rerun = subprocess.run([*CLI, "project", "db", "--until-caught-up"], env=env, capture_output=True, text=True,
                           timeout=90, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert "duplicates 300, gaps 0, invalid 0" in rerun.stderr, rerun.stderr
    assert snapshot(root) == fold(events)
    with ReadModel(root) as rm:
        assert rm.gaps() == {}
        some = events[-1].object_id
        view = rm.get(some)
        assert view is not None and view.version == fold(events)[some][1]
        assert rm.get("never-created") is None


def _config(settings: Settings, group: str) -> RunnerConfig:
    return RunnerConfig(bootstrap=settings.kafka_bootstrap, topics=(settings.topic_events,), group_id=group,
                        batch_size=500, stop_when_caught_up=True, lag_interval_s=60)


def test_duplicates_change_nothing_and_rebuild_matches_live(settings: Settings) -> None:
    outcomes = decisions(n_objects=100, n_commands=2000, seed=5)
    events = [o for o in outcomes if isinstance(o, Event)]
    records = [r for r in encoded(outcomes, settings.partitions) if r[0]]
    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections, records)
    root = settings.var_dir / "read_model"

    live = DbProjection(root, sync=False)
    Runner(_config(settings, "t-live"), live).run()
    assert live.counts.applied == len(events) and live.counts.stale == 0
    before = snapshot(root)
    assert before == fold(events)
    gen_before = current_generation(root)
    store = ReadModelStore(gen_before)  # type: ignore[arg-type]
    raw_before = {k: v.to_bytes() for k, v in store.views()}
    store.close()

    produce(settings.kafka_bootstrap, settings.topic_events, settings.topic_rejections, records[: len(records) // 2])
    again = DbProjection(root, sync=False)
    stats = Runner(_config(settings, "t-live"), again).run()
    assert stats.records == len(records) // 2, "a restart reads only what is new, from the stored offsets"
    assert (again.counts.applied, again.counts.stale) == (0, len(records) // 2)
    store = ReadModelStore(gen_before)  # type: ignore[arg-type]
    assert {k: v.to_bytes() for k, v in store.views()} == raw_before
    store.close()

    # A live projection holding the current generation while the rebuild runs: it follows the swap.
    holder = DbProjection(root, sync=False)
    result = rebuild_read_model(_config(settings, "t-db"), root)
    assert result.stats.records == len(records) + len(records) // 2
    assert current_generation(root) == result.generation != gen_before
    assert snapshot(root) == before
    assert gen_before is not None and gen_before.exists(), "still open by the live projection"
    offsets = holder.reseek()
    assert offsets is not None and sum(offsets.values()) == len(records) + len(records) // 2
    assert not gen_before.exists(), "the live projection removes the generation it left"
    holder.close()
