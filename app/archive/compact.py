"""Compact a finished ``(topic, date)`` of the archive into a few files, beside the file sink's own.

The file sink's files are never rewritten or deleted: its metadata log lists them, and a Spark reader of
``stream/`` fails on a listed file that is gone. Compaction reads a partition's committed files (through the log),
writes them sorted by (partition, offset) under ``compacted/``, and commits by renaming a manifest into
``compacted/_manifests`` that names the files it replaces (``projections.archived``). Files the sink adds to that
date later (records with an old timestamp) are in no manifest, so readers still read them: nothing is lost or
read twice. Spark's ``spark.sql.streaming.fileSink.log.compactInterval`` compacts the sink's *log*, not its data
files; it stays at its default.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from projections.archived import COMPACTED, MANIFESTS, STREAM, files, manifests, partition_values, sink_log

log = logging.getLogger("arbiter.archive")


def finished(root: Path, today: date | None = None) -> list[tuple[str, str]]:
    """Return the (topic, date) partitions before ``today`` (UTC) with more than one uncompacted committed file."""
    today = today or datetime.now(UTC).date()
    covered = {s for m in manifests(root) for s in m.sources}
    counts: dict[tuple[str, str], int] = {}
    for f in sink_log(root / STREAM):
        if str(f.relative_to(root)) in covered:
            continue
        v = partition_values(f)
        if v.get("date", "9999") < today.isoformat():
            counts[(v["topic"], v["date"])] = counts.get((v["topic"], v["date"]), 0) + 1
    return sorted(k for k, n in counts.items() if n > 1)


def compact(spark: Any, root: Path, topic: str, day: str) -> int:  # noqa: ANN401
    """Rewrite the uncompacted committed files of ``(topic, day)`` into one file; return how many it replaced."""
    covered = {s for m in manifests(root) for s in m.sources}
    sources = [f for f in sink_log(root / STREAM) if str(f.relative_to(root)) not in covered
               and partition_values(f).get("topic") == topic and partition_values(f).get("date") == day]
    if len(sources) < 2:
        return 0
    ident = uuid.uuid4().hex[:12]
    rel = Path(COMPACTED) / f"topic={sources[0].parent.parent.name.partition('=')[2]}" / f"date={day}" / ident
    df = spark.read.parquet(*[str(f) for f in sources]).drop("topic", "date")  # they are in the path
    df.sort("partition", "offset").coalesce(1).write.parquet(str(root / rel))
    written = sorted(str(rel / f.name) for f in (root / rel).glob("*.parquet"))
    manifest = {"topic": topic, "date": day, "sources": [str(f.relative_to(root)) for f in sources],
                "files": written, "rows": df.count(), "at": datetime.now(UTC).isoformat()}
    dest = root / COMPACTED / MANIFESTS
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".{ident}.tmp"
    tmp.write_text(json.dumps(manifest, sort_keys=True))
    os.replace(tmp, dest / f"{topic}__{day}__{ident}.json")  # the commit: readers switch to the new files here
    log.info("archive: compacted %s %s: %d files -> %d", topic, day, len(sources), len(written))
    return len(sources)


def compact_finished(spark: Any, root: Path, today: date | None = None) -> int:  # noqa: ANN401
    """Compact every finished partition of the archive at ``root``; return how many files were replaced."""
    return sum(compact(spark, root, topic, day) for topic, day in finished(root, today))


class Compactor:
    """Compact the running archive's finished partitions every ``every_s`` seconds, in a thread of its own.

    It shares the archive's Spark session (jobs from two threads are fine). A pass that fails is logged and tried
    again next time: compaction only adds files beside the sink's, so a failed pass loses nothing.
    """

    def __init__(self, work: Callable[[], int], every_s: float) -> None:
        self._work, self._every = work, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="arbiter-archive-compactor", daemon=True)
        self.passes = 0

    def start(self) -> Compactor:
        if self._every > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                replaced = self._work()
            except Exception as e:  # noqa: BLE001 - logged; the archive itself goes on
                log.warning("archive: scheduled compaction failed, tried again in %g s: %s", self._every, e)
            else:
                if replaced:
                    log.info("archive: scheduled compaction replaced %d files", replaced)
            self.passes += 1


__all__ = ["Compactor", "compact", "compact_finished", "files", "finished"]
