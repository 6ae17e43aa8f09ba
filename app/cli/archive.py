"""``arbiter archive run|compact|files``: the Parquet archive of the topics (docs/operations/archive.md)."""

from __future__ import annotations

import argparse
import logging

from app.settings import get_settings

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("archive", help="copy the topics into Parquet (Spark's file sink, exactly once); compact it")
    actions = p.add_subparsers(dest="action", required=True)
    run = actions.add_parser("run", help="run the archive's streaming query (ARBITER_ARCHIVE_URI, default var/archive; "
                           "its own Spark application on ARBITER_ARCHIVE_SPARK_MASTER, local[1])")
    run.add_argument("--once", action="store_true", help="archive what the topics hold now, then exit")
    run.set_defaults(handler=_run)
    compact = actions.add_parser("compact", help="rewrite finished (before today, UTC) date partitions into one file "
                                 "each; the sink's own files stay (local archives)")
    compact.add_argument("--topic", help="only this topic")
    compact.add_argument("--date", help="only this date (yyyy-mm-dd), even today's")
    compact.set_defaults(handler=_compact)
    actions.add_parser("files", help="print the Parquet files that hold the archive exactly once (for DuckDB and "
                       "other readers that do not read Spark's metadata log)").set_defaults(handler=_files)


def _session():  # noqa: ANN202 - untyped pyspark
    from app.archive.run import session

    return session(get_settings())


def _run(args: argparse.Namespace) -> int:
    import signal

    from app.archive.run import run

    # SIGTERM during start-up stops like Ctrl-C; once the query runs, both only ask it to stop (app.validator.waiting)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run(get_settings(), once=args.once)
    return 0


def _compact(args: argparse.Namespace) -> int:
    from app.archive.compact import compact, finished
    from app.archive.query import kinds
    from projections.archived import local_root

    root = local_root(get_settings().archive_location)
    todo = [(t, d) for t, d in finished(root) if (args.topic in (None, t)) and (args.date in (None, d))]
    if args.date:  # even today's, as its help says: every topic unless one is named
        todo = [(t, args.date) for t in ([args.topic] if args.topic else kinds(get_settings()))]
    if not todo:
        print("nothing to compact")
        return 0
    from app.archive.erase import COMPACT_LOCK, lock

    held = lock(root, "compacting", COMPACT_LOCK)
    try:
        spark = _session()
        try:
            for topic, day in todo:
                print(f"{topic} {day}: {compact(spark, root, topic, day)} files compacted")
        finally:
            spark.stop()
    finally:
        held.release()
    return 0


def _files(_: argparse.Namespace) -> int:
    from projections.archived import files, local_root

    for f in files(local_root(get_settings().archive_location)):
        print(f)
    return 0
