"""``arbiter verify replay``: a Spark batch job that re-decides the archived commands and compares every output.

The archive's Parquet (``app.archive``) holds every generation's commands topic (``app.verify.generations``) and the
outputs with their coordinates. The job reads the rules control records first (on the driver:
``app.verify.timeline``), then shuffles the commands and the stored outputs by record key (the validator's
grouping), sorts each partition by key and offset, and hands each key's run to ``app.verify.refold`` in a
``mapInArrow`` (``by_key``): the validator's own fold decides, and each re-decided record is compared with the
stored one byte for byte (key, value, partition and headers).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from app.archive.query import locations
from app.rules.control import CONTROL_HEADER, RULES_CONTROL
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.validator.fold import limits_for
from app.verify.erased import Erasures, erasures
from app.verify.generations import CommandTopics
from app.verify.refold import Finding, Row, compare, refold
from app.verify.timeline import RulesTimeline, build_timeline

RESULT_DDL = ("what STRING, topic STRING, partition INT, offset BIGINT, source_partition INT, source_offset BIGINT, "
              "detail STRING, source_topic STRING, commands BIGINT, expected BIGINT, stored BIGINT")
_COLUMNS = ("topic", "partition", "offset", "timestamp_ms", "key", "value", "headers")
GROUP_KEY = "object_key"  # what ``by_key`` groups by: the object's key (a parked copy's is its source's)
_WHERE = r"^(.*)\[(\d+)\]@(\d+)$"  # a parked copy's key: ``topic[partition]@offset`` of its source


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What a replay found: counts and the first divergences (stored coordinates, or the command's); erased objects
    (``arbiter erase``) apart: their commands are gone, so they are counted, not re-decided (``app.verify.erased``)."""

    objects: int = 0
    commands: int = 0
    expected: int = 0
    stored: int = 0
    divergences: int = 0
    first: Sequence[Finding] = field(default_factory=tuple)
    rules_versions: Sequence[int] = field(default_factory=tuple)
    erased: int = 0  # objects
    erased_commands: int = 0
    erased_stored: int = 0
    erased_objects: Sequence[str] = field(default_factory=tuple)  # the first ones, by id

    @property
    def clean(self) -> bool:
        return self.divergences == 0

    def as_dict(self) -> dict[str, Any]:
        return {"objects": self.objects, "commands": self.commands, "expected": self.expected, "stored": self.stored,
                "divergences": self.divergences, "rules_versions": list(self.rules_versions),
                "first": [f._asdict() for f in self.first],
                "erased": {"objects": self.erased, "commands": self.erased_commands, "stored": self.erased_stored,
                           "first": list(self.erased_objects)}}


def session(settings: Settings) -> Any:  # noqa: ANN401 - untyped pyspark
    """Return a Spark session for a replay: ``local[*]`` unless ``ARBITER_SPARK_MASTER`` names another master."""
    from app.spark_session import spark_session

    master = settings.spark_master if "ARBITER_SPARK_MASTER" in os.environ else "local[*]"
    return spark_session(settings.model_copy(update={"spark_master": master}), app_name="arbiter-verify")


def archive_rows(spark: Any, settings: Settings, topics: CommandTopics, *, tail: bool = False) -> Any:  # noqa: ANN401
    """Return the archived records of every generation's commands topic (``topics``) and of the output topics, with
    the columns a replay needs.

    With ``tail``, also the records the topics hold after the archive's last offset of each partition (a Kafka
    batch read): the validator must have decided them all by then, or their outputs are reported missing.
    """
    outputs = settings.output_partitions or settings.partitions
    counts = {**{t: topics.settings(t).partitions for t in topics.names},
              **dict.fromkeys((settings.topic_events, settings.topic_rejections, settings.parked_topic), outputs)}
    df = spark.read.parquet(locations(settings)[0])
    archived = df.where(df.topic.isin(*counts)).select(*_COLUMNS)
    if not tail:
        return archived
    return archived.unionByName(topic_tail(spark, settings, archived, counts))


def topic_tail(spark: Any, settings: Settings, archived: Any, topics: Mapping[str, int]) -> Any:  # noqa: ANN401
    """Return the records of ``topics`` (name -> partition count) after the archive's last offset of each partition
    (all of a partition it has none of), read from Kafka as one batch up to the latest offsets."""
    import json

    from app.archive.query import source_options

    last = {(r["topic"], r["partition"]): r["o"] for r in
            archived.groupBy("topic", "partition").agg({"offset": "max"}).withColumnRenamed("max(offset)", "o")
            .collect()}
    start = {t: {str(p): last[(t, p)] + 1 if (t, p) in last else -2 for p in range(n)} for t, n in topics.items()}
    reader = spark.read.format("kafka")
    for k, v in source_options(settings).items():
        if k.startswith("kafka.") or k in ("includeHeaders", "failOnDataLoss"):
            reader = reader.option(k, v)
    return reader.option("subscribe", ",".join(topics)).option("startingOffsets", json.dumps(start)) \
        .option("endingOffsets", "latest").load() \
        .selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS timestamp_ms", "key", "value", "headers")


def _headers(raw: Sequence[dict[str, Any]] | None) -> tuple[tuple[str, bytes], ...]:
    return tuple((h["key"], bytes(h["value"]) if h["value"] is not None else b"") for h in raw or ())


def to_row(d: dict[str, Any]) -> Row:
    """Return a ``Row`` of one archived record as pyarrow's ``to_pylist`` gives it."""
    return Row(d["topic"], d["partition"], d["offset"], d["timestamp_ms"], d["key"], d["value"], _headers(d["headers"]))


def rows_of(batch: pa.RecordBatch) -> list[Row]:
    """Return a batch's records as ``Row``s, column by column (``to_pylist`` of the batch builds a dict per row and
    iterates each, ~40 % of a task's Python time in bench/verify_replay.py). The headers come as ``headers`` (a list
    of key/value structs, as archived) or split into ``header_keys`` and ``header_values`` (``by_key``: Spark
    writes two lists to Arrow faster than one list of structs)."""
    if "header_keys" in batch.schema.names:
        keys, bounds = _items(batch.column("header_keys"))
        names = _strings(keys) if len(keys) else []
        values = _items(batch.column("header_values"))[0].to_pylist()
    else:
        pairs, bounds = _items(batch.column("headers"))
        names, values = [], []
        if pa.types.is_struct(pairs.type) and len(pairs):  # (pyarrow infers a list of nulls for no header at all)
            k, v = pairs.flatten()  # each field as sliced
            names, values = _strings(k), v.to_pylist()
    if None in values:
        values = [x if x is not None else b"" for x in values]
    headers = [tuple(zip(names[a:b], values[a:b], strict=True)) if b > a else ()
               for a, b in zip(bounds, bounds[1:], strict=False)]
    cols = [batch.column(n).to_pylist() for n in _COLUMNS[:-1]]
    return list(map(Row._make, zip(*cols, headers, strict=True)))


def _items(lists: pa.Array) -> tuple[pa.Array, list[int]]:
    """Return (the items a list column's offsets span, its offsets counted from 0).

    Not ``lists.values`` (the whole child of a sliced array) nor ``flatten`` (which drops a null list's entries and
    would shift the offsets)."""
    bounds = lists.offsets.to_pylist()
    return lists.values.slice(bounds[0], bounds[-1] - bounds[0]), [b - bounds[0] for b in bounds]


def _strings(array: pa.Array) -> list[str | None]:
    """Return a string column as Python strings, one object per distinct value (header names repeat per record)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    encoded = pc.dictionary_encode(array)
    words = encoded.dictionary.to_pylist()
    return [None if i is None else words[i] for i in encoded.indices.to_pylist()]


def timeline_of(frame: Any, settings: Settings, topics: CommandTopics) -> RulesTimeline:  # noqa: ANN401
    """Collect the control records of the commands topics (few: one per partition per deploy) into a timeline."""
    controls = frame.where(frame.topic.isin(*topics.names) & is_control_row()).collect()
    rows = [to_row(r.asDict(recursive=True)) for r in controls]
    return build_timeline([(r.topic, r.partition, r.offset, r.key, r.value, _header(r, SIGNATURE_HEADER))
                           for r in rows], settings, topics)


def _header(r: Row, name: str) -> bytes | None:
    return next((v for k, v in r.headers if k == name), None)


def is_control_row() -> Any:  # noqa: ANN401
    from pyspark.sql import functions as F

    # array_contains first: a plain expression, where ``exists`` runs its lambda interpreted on every row
    return F.array_contains(F.col("headers.key"), CONTROL_HEADER) & \
        F.exists("headers", lambda h: (h.key == CONTROL_HEADER) & (h.value == F.lit(bytearray(RULES_CONTROL))))


def is_late_row(topics: CommandTopics) -> Any:  # noqa: ANN401
    """Return the condition of a record written to a closed generation after it closed (``CommandTopics.late``)."""
    from pyspark.sql import functions as F

    late = F.lit(False)
    for topic, ends in topics.closed.items():
        first = F.lit(0)  # a partition its validator committed nothing of: every record came late
        for partition, offset in ends.items():
            first = F.when(F.col("partition") == partition, F.lit(offset)).otherwise(first)
        late = late | ((F.col("topic") == topic) & (F.col("offset") >= first))
    return late


_RESULT_SCHEMA = pa.schema([("what", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                            ("offset", pa.int64()), ("source_partition", pa.int32()), ("source_offset", pa.int64()),
                            ("detail", pa.string()), ("source_topic", pa.string()), ("commands", pa.int64()),
                            ("expected", pa.int64()), ("stored", pa.int64())])


class VerifyGroup:
    """One key's commands and stored outputs in, its findings and one summary row out (for an erased object, its
    ``erased`` row instead of the summary: its commands are gone, nothing is re-decided)."""

    def __init__(self, settings: Settings, timeline: RulesTimeline, since_ms: int | None,
                 erased: Erasures | None = None, topics: CommandTopics | None = None) -> None:
        self.settings, self.timeline, self.since_ms = settings.for_tasks(), timeline, since_ms
        self.erased = dict(erased or {})
        self.limits = limits_for(self.settings)
        self.topics = (topics or CommandTopics.single(settings)).for_tasks()

    def __call__(self, rows: list[Row]) -> list[dict[str, Any]]:
        commands = [r for r in rows if r.topic in self.topics.numbers]
        stored = [r for r in rows if r.topic not in self.topics.numbers]
        out: list[dict[str, Any]] = []
        erased: str | None = None
        for r in rows:
            if r.value is not None:
                continue
            who = self.erased.get((r.topic, r.partition, r.offset))
            if who is None:  # a value that no erasure nulled: damaged or forged
                out.append(Finding("divergent", r.topic, r.partition, r.offset, None, None,
                                   "the record's value is null and no erasure names it")._asdict())
            else:
                erased = erased or who
        if erased is not None:
            out.append({"what": "erased", "topic": self.settings.topic_commands, "detail": erased,
                        "commands": len(commands), "stored": len(stored)})
            return out
        expected = refold(commands, self.timeline, self.settings, self.limits, self.topics)
        out += [f._asdict() for f in compare(expected, stored, self.since_ms)]
        out.append({"what": "summary", "commands": len(expected.decisions), "expected": len(expected.outputs),
                    "stored": len(stored)})
        return out


class SortedGroups:
    """``mapInArrow`` function over rows sorted by group key within each Spark partition: hands each run of one key to
    ``group`` (a key's run may span batches) and yields its output rows as batches of ``schema``.

    One Python call per batch instead of one per key (``applyInArrow`` builds an Arrow table per group: with a few
    commands per object that cost several times the decisions, bench/verify_replay.py). The group key is the column
    ``GROUP_KEY`` where the batch has it (``by_key``), else the record key.
    """

    def __init__(self, group: Callable[[list[Row]], list[dict[str, Any]]], schema: pa.Schema) -> None:
        self.group, self.schema = group, schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        run: list[Row] = []
        last: bytes | None = None
        for batch in batches:
            out: list[dict[str, Any]] = []
            keys = batch.column(GROUP_KEY if GROUP_KEY in batch.schema.names else "key").to_pylist()
            for key, row in zip(keys, rows_of(batch), strict=True):
                if run and key != last:
                    out += self.group(run)
                    run = []
                run.append(row)
                last = key
            if out:
                yield pa.RecordBatch.from_pylist(out, schema=self.schema)
        if run:
            yield pa.RecordBatch.from_pylist(self.group(run), schema=self.schema)


def by_key(rows: Any, group: Callable[[list[Row]], list[dict[str, Any]]], schema: pa.Schema,  # noqa: ANN401
           ddl: str) -> Any:  # noqa: ANN401
    """Shuffle ``rows`` by group key (``GROUP_KEY``, else the record key), sort each partition by (that key, topic,
    partition, offset), run ``group`` per key."""
    if GROUP_KEY not in rows.columns:
        rows = rows.withColumn(GROUP_KEY, rows.key)
    return rows.repartition(GROUP_KEY).sortWithinPartitions(GROUP_KEY, "topic", "partition", "offset") \
        .withColumn("header_keys", rows.headers.key).withColumn("header_values", rows.headers.value) \
        .drop("headers").mapInArrow(SortedGroups(group, schema), ddl)


def with_group_key(rows: Any, settings: Settings, topics: CommandTopics) -> Any:  # noqa: ANN401
    """Return ``rows`` with ``GROUP_KEY``: the record key, but for a parked copy its source command's key.

    A parked copy is keyed by its source's coordinates (``commands[p]@o``, ``app.validator.parking``), so grouped
    by its own key it would meet no command: the source keys are looked up by a join of the (few) parked copies'
    coordinates with the commands. A copy whose source is not there keeps its own key and is reported divergent.
    """
    from pyspark.sql import functions as F

    parked = rows.where(F.col("topic") == settings.parked_topic)
    others = rows.where(F.col("topic") != settings.parked_topic).withColumn(GROUP_KEY, F.col("key"))
    if not parked.limit(1).count():
        return others
    text = F.col("key").cast("string")
    parked = parked.withColumn("_src_topic", F.regexp_extract(text, _WHERE, 1)) \
        .withColumn("_src_partition", F.regexp_extract(text, _WHERE, 2).cast("int")) \
        .withColumn("_src_offset", F.regexp_extract(text, _WHERE, 3).cast("long"))
    wanted = parked.select("_src_topic", "_src_partition", "_src_offset").distinct()
    sources = rows.select(F.col("topic").alias("_src_topic"), F.col("partition").alias("_src_partition"),
                          F.col("offset").alias("_src_offset"), F.col("key").alias("_src_key"),
                          F.lit(True).alias("_found")) \
        .where(F.col("_src_topic").isin(*topics.names)) \
        .join(F.broadcast(wanted), on=["_src_topic", "_src_partition", "_src_offset"], how="left_semi").distinct()
    keyed = parked.join(F.broadcast(sources), on=["_src_topic", "_src_partition", "_src_offset"], how="left") \
        .withColumn(GROUP_KEY, F.when(F.col("_found"), F.col("_src_key")).otherwise(F.col("key"))) \
        .drop("_src_topic", "_src_partition", "_src_offset", "_src_key", "_found")  # a source's key may be null
    return others.unionByName(keyed)


def replay(spark: Any, settings: Settings, *, since_ms: int | None = None,  # noqa: ANN401
           objects: Sequence[str] | None = None, first: int = 20, tail: bool = False) -> ReplayReport:
    """Re-decide the archive (with ``tail``, and the topics past it) and compare; ``since_ms`` and ``objects``
    narrow what is compared (see ``refold``)."""
    from pyspark.sql import functions as F

    topics = CommandTopics.read(settings)
    frame = archive_rows(spark, settings, topics, tail=tail)
    timeline = timeline_of(frame, settings, topics)
    rows = with_group_key(frame, settings, topics)
    if objects:
        rows = rows.where(F.col(GROUP_KEY).cast("string").isin(*objects))
    if since_ms is not None:  # only objects with a command since then; each still folds from its first command
        recent = rows.where(F.col("topic").isin(*topics.names) & (F.col("timestamp_ms") >= since_ms)) \
            .select(GROUP_KEY).distinct()
        rows = rows.join(recent, on=GROUP_KEY, how="left_semi")
    group = VerifyGroup(settings, timeline, since_ms, erasures(settings), topics)
    result = by_key(rows, group, _RESULT_SCHEMA, RESULT_DDL).cache()
    try:
        totals = result.where(F.col("what") == "summary").agg(
            F.count("*").alias("objects"), F.sum("commands").alias("commands"), F.sum("expected").alias("expected"),
            F.sum("stored").alias("stored")).collect()[0]
        gone = result.where(F.col("what") == "erased")
        erased = gone.agg(F.count("*").alias("objects"), F.sum("commands").alias("commands"),
                          F.sum("stored").alias("stored")).collect()[0]
        erased_ids = tuple(r["detail"] for r in gone.orderBy("detail").limit(first).collect())
        bad = result.where(~F.col("what").isin("summary", "erased"))
        count = bad.count()
        found = [Finding(r["what"], r["topic"], r["partition"], r["offset"], r["source_partition"],
                         r["source_offset"], r["detail"], r["source_topic"])
                 for r in bad.orderBy("topic", "partition", "offset", "source_partition", "source_offset")
                 .limit(first).collect()]
    finally:
        result.unpersist()
    return ReplayReport(totals["objects"] or 0, totals["commands"] or 0, totals["expected"] or 0,
                        totals["stored"] or 0, count, tuple(found), tuple(sorted(timeline.documents)),
                        erased["objects"] or 0, erased["commands"] or 0, erased["stored"] or 0, erased_ids)
