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
import uuid
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


__all__ = ["compact", "files", "finished"]
