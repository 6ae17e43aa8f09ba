"""The archive component's stop and failure paths (``app.archive.run``), with Spark replaced by a scripted query."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from app.archive import run as archive_run
from app.settings import Settings

pytestmark = pytest.mark.unit


class Query:
    """What ``run`` calls on a streaming query; ``wait`` scripts its awaitTermination."""

    name = "arbiter-archive"
    lastProgress = None  # noqa: N815 - pyspark's name
    isActive = True  # noqa: N815

    def __init__(self, wait: Any) -> None:  # noqa: ANN401
        self.wait, self.stopped = wait, 0

    def awaitTermination(self, timeout: float) -> bool:  # noqa: N802
        return self.wait()

    def stop(self) -> None:
        self.stopped += 1
        raise RuntimeError("An error occurred while calling o98.stop.")  # the JVM got the group's SIGTERM too


class Session:
    stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, query: Query) -> Session:
    spark = Session()
    monkeypatch.setattr(archive_run, "session", lambda s: spark)
    monkeypatch.setattr(archive_run, "start", lambda sp, s, available_now: query)
    archive_run.run(Settings(var_dir=tmp_path))
    return spark


def test_a_stop_signal_ends_the_archive_cleanly_whichever_side_stops_first(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    def signalled_then_failed() -> bool:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets the stop flag
        raise RuntimeError("Query arbiter-archive terminated with error")  # ...and the JVM went first

    for wait in (lambda: os.kill(os.getpid(), signal.SIGTERM) or False, signalled_then_failed):
        query = Query(wait)
        caplog.clear()
        with caplog.at_level("INFO", "arbiter.archive"):
            spark = _run(monkeypatch, tmp_path, query)
        assert "archive stopped" in caplog.text and spark.stopped == 1


def test_a_failed_query_is_archive_failed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def failed() -> bool:
        raise RuntimeError("Partition commands-0's offset was changed from 10 to 0, some data may have been missed")

    with pytest.raises(archive_run.ArchiveFailed, match="offset was changed") as e:
        _run(monkeypatch, tmp_path, Query(failed))
    assert e.value.code == "ARCHIVE_FAILED"


def test_the_scheduled_compaction_runs_every_interval_survives_a_failed_pass_and_stops() -> None:
    import threading

    from app.archive.compact import Compactor

    calls: list[int] = []
    third = threading.Event()

    def work() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk full")  # a failed pass is logged; the next one still comes
        if len(calls) >= 3:
            third.set()
        return 2

    compactor = Compactor(work, 0.01).start()
    assert third.wait(10), "the compactor stopped after a failed pass"
    compactor.stop()
    n = len(calls)
    assert compactor.passes >= 3
    threading.Event().wait(0.05)
    assert len(calls) == n, "the compactor went on after stop()"
    idle = Compactor(work, 0).start()  # 0 = never
    idle.stop()
    assert len(calls) == n


def test_only_a_running_local_archive_compacts_on_a_schedule(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    assert archive_run._compactor(None, s, once=False)._every == 3600.0
    assert archive_run._compactor(None, s, once=True)._every == 0.0  # --once: what the topics hold, then exit
    remote = s.model_copy(update={"archive_uri": "s3a://bucket/archive"})
    assert archive_run._compactor(None, remote, once=False)._every == 0.0
    off = s.model_copy(update={"archive_compact_every_s": 0})
    assert archive_run._compactor(None, off, once=False)._every == 0.0


def test_a_scheduled_pass_holds_compactions_lock_and_skips_while_another_compaction_holds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.archive.erase import COMPACT_LOCK, ArchiveBusy, lock

    calls: list[bool] = []

    def compact_finished(spark: object, root: Path) -> int:
        with pytest.raises(ArchiveBusy):  # held by the pass: arbiter archive compact and erase keep out
            lock(root, "a second compaction", COMPACT_LOCK)
        calls.append(True)
        return 5

    monkeypatch.setattr(archive_run, "compact_finished", compact_finished)
    assert archive_run._compact_pass(None, tmp_path) == 5 and calls == [True]
    held = lock(tmp_path, "compacting by hand", COMPACT_LOCK)  # arbiter archive compact is running
    try:
        assert archive_run._compact_pass(None, tmp_path) == 0 and calls == [True]
    finally:
        held.release()
