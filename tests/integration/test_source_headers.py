"""The commands source's header columns on the real Kafka source: the first header of each name, null when absent."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from app.settings import Settings
from app.validator.source import HEADER_COLUMNS, kafka_source
from app.validator.topic_io import produce_with_headers

pytestmark = pytest.mark.integration

NAMES = [name for _, name in HEADER_COLUMNS]
OTHER = "x-other"

# One record per case: the headers as sent, in order (duplicates and unknown names included).
CASES: list[list[tuple[str, bytes | None]]] = [
    [],
    [(NAMES[0], b"sig")],
    [(NAMES[0], b"first"), (NAMES[0], b"second")],
    [(OTHER, b"o"), (NAMES[1], b"tp"), (OTHER, b"o2"), (NAMES[1], b"tp2")],
    [(NAMES[3], b"ctl"), (NAMES[2], b"ts"), (NAMES[1], b"tp"), (NAMES[0], b"sig")],
    [(NAMES[2], None), (NAMES[2], b"after a null value")],
    [(OTHER, b""), (NAMES[0], b"")],
    [(NAMES[0] + "-suffix", b"no"), (NAMES[0][:-1], b"no"), (NAMES[0].upper(), b"no")],
]


def first_of(headers: list[tuple[str, bytes | None]], name: str) -> bytes | None:
    return next((v for k, v in headers if k == name), None)


def test_each_header_column_is_the_first_header_of_its_name(spark, settings: Settings, tmp_path: Path) -> None:  # noqa: ANN001
    records = [(b"k", b"v%d" % i, list(h), 0) for i, h in enumerate(CASES)]
    produce_with_headers(settings, records, settings.topic_commands)  # type: ignore[arg-type]
    name = f"headers_{uuid.uuid4().hex[:8]}"
    q = kafka_source(spark, settings, available_now=True) \
        .select("value", *(c for c, _ in HEADER_COLUMNS)).writeStream.format("memory").queryName(name) \
        .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    q.awaitTermination()
    rows = {bytes(r["value"]): r for r in spark.sql(f"SELECT * FROM {name}").collect()}
    assert len(rows) == len(CASES)
    for i, headers in enumerate(CASES):
        row = rows[b"v%d" % i]
        got = {column: None if row[column] is None else bytes(row[column]) for column, _ in HEADER_COLUMNS}
        assert got == {column: first_of(headers, header) for column, header in HEADER_COLUMNS}, headers
