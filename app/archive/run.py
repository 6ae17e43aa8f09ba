"""Run the archive as a component: its own Spark application, its progress published, a clean stop on SIGTERM."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from app.archive.compact import Compactor, compact_finished
from app.archive.erase import COMPACT_LOCK, ArchiveBusy, lock
from app.archive.query import locations, start
from app.errors import ArbiterError
from app.settings import Settings
from app.validator.lock import FileLock
from app.validator.progress import QueryWatch, write_progress
from app.validator.waiting import await_query, stop_on_signal
from projections.archived import local_root

log = logging.getLogger("arbiter.archive")
PROGRESS_FILE = "archive-progress.json"


class ArchiveFailed(ArbiterError):
    """The archive query stopped with an error (e.g. records deleted by retention before they were archived)."""

    code = "ARCHIVE_FAILED"


def progress_path(settings: Settings) -> Path:
    """Return ``<var_dir>/status/archive-progress.json``: the archive query's latest micro-batch."""
    return settings.path(settings.var_dir) / "status" / PROGRESS_FILE


def session(settings: Settings) -> Any:  # noqa: ANN401
    """Return the archive's Spark session, on ``archive_spark_master`` (one core by default).

    Its checkpoint is the archive's: the session picks Spark's checkpoint file manager by that location.
    """
    from app.spark_session import spark_session

    return spark_session(settings.model_copy(update={"spark_master": settings.archive_spark_master,
                                                     "checkpoint_location": locations(settings)[1]}),
                         app_name="arbiter-archive")


def run(settings: Settings, *, once: bool = False) -> None:
    """Archive until SIGINT or SIGTERM (``once``: what the topics hold now); raise ``ArchiveFailed`` if it fails.

    A stop is clean whatever the order in which the driver and its JVM get the signal (``arbiter run`` signals
    the whole process group): the batch under way is not in the sink's log and is redone on the next start.
    """
    held = _lock(settings)  # an erasure rewrites the archive's files: never under a running query
    try:
        _run(settings, once=once)
    finally:
        if held is not None:
            held.release()


def _lock(settings: Settings) -> FileLock | None:
    """Take a local archive's lock (``ArchiveBusy`` if held); a remote archive has none."""
    from urllib.parse import urlparse

    if urlparse(settings.archive_location).scheme not in ("", "file"):
        return None
    root = local_root(settings.archive_location)
    root.mkdir(parents=True, exist_ok=True)
    return lock(root, "starting another archive query")


def _run(settings: Settings, *, once: bool) -> None:
    spark = session(settings)
    stopping = False
    compactor = _compactor(spark, settings, once)
    try:
        with stop_on_signal() as stop:
            query = start(spark, settings, available_now=once)
            compactor.start()
            watch = QueryWatch(query, progress_path(settings))
            log.info("archive started: query=%s path=%s checkpoint=%s master=%s trigger=%s", query.name,
                     *locations(settings), settings.archive_spark_master,
                     "availableNow" if once else settings.archive_trigger_interval)
            try:
                await_query(query, None, stop)
                if stop.is_set():
                    query.stop()
            except Exception as e:
                if not stop.is_set():
                    raise ArchiveFailed(f"the archive query failed: {_first_line(e)}") from e
                log.info("archive: its Spark JVM stopped first (%s)", _first_line(e))
            finally:
                compactor.stop()
                watch.stop()
                stopping = stop.is_set()
        if stopping:
            log.info("archive stopped: committed batches are in the archive; the one under way is redone on restart")
            return
        last = query.lastProgress  # the watch polls once a second: publish the last batch of an --once run
        if last is not None:
            write_progress(progress_path(settings), json.loads(last.json))
    finally:
        try:
            spark.stop()
        except Exception as e:  # noqa: BLE001 - only when stopping: the JVM is gone already
            if not stopping:
                raise
            log.debug("spark.stop() after the JVM stopped: %s", e)


def _compactor(spark: Any, settings: Settings, once: bool) -> Compactor:  # noqa: ANN401
    """Return the scheduled compaction of a running, local archive (``archive_compact_every_s``; never for --once)."""
    every = 0.0 if once else settings.archive_compact_every_s
    try:
        root = local_root(settings.archive_location)
    except ArbiterError:
        if every:
            log.info("archive: %s is not local; compact it with Spark yourself", settings.archive_location)
        every = 0.0
        root = Path()
    return Compactor(lambda: _compact_pass(spark, root), every)


def _compact_pass(spark: Any, root: Path) -> int:  # noqa: ANN401
    """One scheduled pass under compaction's lock (``arbiter archive compact`` takes it too); skipped if held."""
    try:
        held = lock(root, "compacting", COMPACT_LOCK)
    except ArchiveBusy as e:
        log.info("archive: scheduled compaction skipped: %s", e)
        return 0
    try:
        return compact_finished(spark, root)
    finally:
        held.release()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:500] if text else type(e).__name__
