"""The archive's erasures, as a replay must know them: every row ``arbiter erase`` nulled, by its coordinates.

``arbiter erase`` records each row whose value it nulls in the Parquet file's own key-value metadata
(``arbiter.erased``: object id, partition, offset, SHA-256 and length; ``app.archive.erase``), and the file's
``topic=`` directory names its topic. An erased object's commands are gone, so no fold can re-decide it: a replay
reports it apart (``erased``), not as a divergence, and verifies everything else. A null value that no erasure names
is not an erasure but a damaged or forged record: a divergence. Only a local archive is ever purged by
``arbiter erase`` (docs/operations/erasure.md), so a remote one has no erasures to read here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from urllib.parse import urlparse

from app.archive.erase import MARKER
from app.settings import Settings
from projections.archived import STREAM, local_root, partition_values, sink_log

#: (topic, partition, offset) of a nulled row -> the erased object's id
Erasures = Mapping[tuple[str, int, int], str]


def erasures(settings: Settings) -> dict[tuple[str, int, int], str]:
    """Return every row of the archive's committed stream files that an erasure nulled (empty for a remote
    archive); read from the files' footers only."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    if urlparse(settings.archive_location).scheme not in ("", "file"):
        return {}
    root = local_root(settings.archive_location)
    out: dict[tuple[str, int, int], str] = {}
    for path in sink_log(root / STREAM):
        if not path.exists():
            continue
        meta = pq.read_metadata(path).metadata or {}
        if MARKER not in meta:
            continue
        topic = partition_values(path).get("topic", "")
        for e in json.loads(meta[MARKER]):
            out[(topic, int(e["partition"]), int(e["offset"]))] = str(e["object_id"])
    return out
