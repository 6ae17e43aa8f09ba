"""``arbiter validator [--available-now]``: run the validator job (local Spark by default, ARBITER_SPARK_MASTER otherwise)."""

from __future__ import annotations

import argparse

from app.settings import Settings, checkpoint_uri, get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("validator", help="run the validator: commands -> events and rejections")
    p.add_argument("--available-now", action="store_true", help="process every command on the topic, then exit")
    p.add_argument("--timeout", type=float, default=3600, help="with --available-now: give up after this many seconds")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import signal

    # SIGTERM to this process stops the validator like Ctrl-C: during start-up it raises here; once the query
    # runs, ``run``/``drain`` take both signals, stop the query, then hand its lease over at once
    # (``app.validator.waiting.stop_on_signal``). A whole process group's SIGTERM also stops Spark's JVM, and the
    # lease then expires with its session instead.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    from app.contract.registry import RegistryRegistration
    from app.metrics.server import serve_metrics
    from app.rescale.generation import generation_settings
    from app.rescale.handover import Handover
    from app.rescale.late import LateRecords
    from app.spark_session import spark_session
    from app.topics import ensure_topics
    from app.validator.job import drain, run
    from app.validator.metrics import ValidatorCollector

    # The current generation of the commands topic (app.rescale): its topic, partition count and checkpoint.
    handover = None if args.available_now else Handover(get_settings(), warm=_warm_servers)
    settings = generation_settings(get_settings()) if handover is None else handover.settings()
    ensure_topics(settings)
    RegistryRegistration(settings).start()  # ids that disagree refuse the start; an outage is retried meanwhile
    spark = spark_session(settings, app_name="arbiter-validator")
    collector = ValidatorCollector(settings)
    metrics = serve_metrics("validator", settings.metrics_host, settings.validator_metrics_port, [collector])
    try:
        if handover is None:
            drain(spark, settings, timeout=args.timeout)
        else:
            # What a direct producer still writes to a closed generation is rejected and parked, never lost.
            late = LateRecords(get_settings()).start()
            handover.start()
            try:
                # A rescale's switch stops the drained generation's query; the next one starts in this process and
                # Spark session (app.rescale.handover), not in a new process started cold.
                while run(spark, settings, until=handover.switched):
                    settings = handover.next_settings()
                    ensure_topics(settings)
                    RegistryRegistration(settings).start()  # its commands topic's <topic>-value subject
                    if "spark.sql.shuffle.partitions" not in settings.spark_conf:  # as a session started on it has
                        spark.conf.set("spark.sql.shuffle.partitions", str(settings.partitions))
                    collector.settings = settings
            finally:
                handover.stop()
                late.stop()
    finally:
        if metrics is not None:
            metrics.close()
        spark.stop()
    return 0


def _warm_servers(settings: Settings) -> None:
    """Start the shard servers of a generation before its query needs them (``app.rescale.handover``)."""
    from app.validator.rocks.client import start_servers

    if settings.state_backend == "rocksdb" and settings.spark_master.startswith("local"):  # servers beside this driver
        start_servers(settings, checkpoint_uri(settings))
