"""Read the Parquet archive without Spark: its committed files, and one topic's records in offset order.

The archive (written by ``app.archive``) is laid out under its root as:

- ``stream/``: the file sink's output, ``topic=<t>/date=<yyyy-mm-dd>/part-*.parquet``, and ``_spark_metadata/``,
  the sink's log of committed files. A file in ``stream/`` that the log does not list was written by a micro-batch
  that failed before its commit (Spark retries it under new names): it must not be read. So readers list files
  through the log, never by globbing.
- ``compacted/``: one directory per compaction of a finished ``(topic, date)``, and ``compacted/_manifests/*.json``,
  each naming the stream files it replaces and the files it wrote; the manifest is written last (renamed into
  place), so a compaction that died half-way is invisible. The stream files stay (the sink's log lists them).

``files`` gives the set a reader must read: the committed stream files no manifest covers, plus every manifest's
files. It reads local archives (a ``file:`` URI or a path); Spark reads any URI (``app.archive``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from commands.errors import ArbiterError

log = logging.getLogger(__name__)

STREAM, COMPACTED, MANIFESTS, CHECKPOINT = "stream", "compacted", "_manifests", "_checkpoint"
RAW_COLUMNS = ("partition", "offset", "timestamp_ms", "key", "value")


class ArchiveGap(ArbiterError):
    """The archive misses offsets of a partition (or Kafka no longer holds the ones after it): no exact rebuild."""

    code = "ARCHIVE_GAP"


def local_root(uri: str) -> Path:
    """Return the local directory of an archive URI; raise for a remote one."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else uri)
    raise ArbiterError(f"archive {uri!r} is not local: read it with Spark (docs/operations/archive.md)",
                       code="ARCHIVE_NOT_LOCAL")


def local_path(path: str) -> Path:
    """Return the local path of a file named in the sink's log (a ``file:`` URI or a path)."""
    parsed = urlparse(path)
    return Path(unquote(parsed.path)) if parsed.scheme in ("file", "") else Path(path)


def sink_log(stream: Path) -> list[Path]:
    """Return the files the file sink's metadata log lists as committed (latest compact batch plus later deltas)."""
    meta = stream / "_spark_metadata"
    if not meta.is_dir():
        return []
    batches: dict[int, Path] = {}
    for f in meta.iterdir():
        name = f.name.removesuffix(".compact")
        if name.isdigit():
            batches[int(name)] = f
    compacts = [b for b, f in batches.items() if f.name.endswith(".compact")]
    start = max(compacts, default=0)
    live: dict[str, Path] = {}
    for b in sorted(b for b in batches if b >= start):
        lines = batches[b].read_text().splitlines()
        if not lines or not lines[0].startswith("v"):
            raise ArbiterError(f"{batches[b]}: not a file sink log entry", code="ARCHIVE_LOG_UNREADABLE")
        for line in lines[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                live[entry["path"]] = local_path(entry["path"])
            else:
                live.pop(entry["path"], None)
    return sorted(live.values())


@dataclass(frozen=True)
class Manifest:
    """One compaction: the stream files it replaces and the files it wrote."""

    topic: str
    date: str
    sources: tuple[str, ...]
    files: tuple[str, ...]


def manifests(root: Path) -> list[Manifest]:
    out = []
    for f in sorted((root / COMPACTED / MANIFESTS).glob("*.json")):
        d = json.loads(f.read_text())
        out.append(Manifest(d["topic"], d["date"], tuple(d["sources"]), tuple(d["files"])))
    return out


def files(root: Path) -> list[Path]:
    """Return the Parquet files holding the archive exactly once each: compacted ones and uncovered stream ones.

    ``root`` may be relative (the default ``var/archive``): the sink log names absolute paths, so it is resolved first.
    """
    root = root.resolve()
    done = manifests(root)
    covered = {s for m in done for s in m.sources}
    stream = [f for f in sink_log(root / STREAM) if str(f.relative_to(root)) not in covered]
    return stream + [root / f for m in done for f in m.files]


def partition_values(path: Path) -> dict[str, str]:
    """Return the ``name=value`` directory parts of a file's path (Spark escapes values as %XX)."""
    return {k: unquote(v) for k, _, v in (p.partition("=") for p in path.parts if "=" in p)}


def topic_files(root: Path, topic: str) -> list[Path]:
    return [f for f in files(root) if partition_values(f).get("topic") == topic]


def read_topic(root: Path, topic: str) -> tuple[list[int], list[int], list[int], list[bytes | None], list[bytes | None]]:
    """Return one topic's archived records as columns (partition, offset, timestamp ms, key, value), sorted by
    (partition, offset), each record once."""
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    tables = [pq.read_table(f, columns=list(RAW_COLUMNS)) for f in topic_files(root, topic)]
    if not tables:
        return [], [], [], [], []
    table = pa.concat_tables(tables).sort_by([("partition", "ascending"), ("offset", "ascending")])
    cols = tuple(table.column(c).to_pylist() for c in RAW_COLUMNS)
    keep = [i for i in range(len(cols[0])) if i == 0 or (cols[0][i], cols[1][i]) != (cols[0][i - 1], cols[1][i - 1])]
    if len(keep) == len(cols[0]):
        return cols
    return tuple([c[i] for i in keep] for c in cols)  # type: ignore[return-value]


def ends(partitions: list[int], offsets: list[int], topic: str) -> dict[int, int]:
    """Return the next offset after the archive per partition; raise ``ArchiveGap`` unless each partition's
    archived offsets run from 0 without a hole (events are written without transactions: no marker offsets)."""
    out: dict[int, int] = {}
    for p, o in zip(partitions, offsets, strict=True):
        expected = out.get(p, 0)
        if o != expected:
            raise ArchiveGap(f"the archive of {topic}[{p}] jumps from offset {expected - 1} to {o}: offsets "
                             f"{expected}..{o - 1} are in no committed archive file")
        out[p] = o + 1
    return out


def batches(root: Path, topic: str, size: int) -> Iterator[list[tuple[int, int, int, bytes | None, bytes | None]]]:
    """Yield the topic's archived records in (partition, offset) order, ``size`` at a time."""
    cols = read_topic(root, topic)
    rows = list(zip(*cols, strict=True))
    for i in range(0, len(rows), size):
        yield rows[i:i + size]
