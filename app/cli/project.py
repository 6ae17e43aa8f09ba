"""``arbiter project db|audit|log``: run a projection; ``arbiter project db --rebuild``: rebuild the read model."""

from __future__ import annotations

import argparse
import logging

from app import traces
from app.limits import consumer_config
from app.settings import Settings, get_settings
from projections.runner import RESET_POSITIONS, Decoder, Projection, Runner, RunnerConfig
from schemas import codec

log = logging.getLogger(__name__)


def runner_config(s: Settings, name: str, topics: tuple[str, ...], *, assign_all: bool,
                  until_caught_up: bool = False, reset_out_of_range: str | None = None) -> RunnerConfig:
    """Map Settings onto the runner's plain configuration."""
    return RunnerConfig(bootstrap=s.kafka_bootstrap, topics=topics, group_id=f"{s.projection_group_prefix}-{name}",
                        kafka_config={**consumer_config(s), **s.kafka_config}, assign_all=assign_all,
                        batch_size=s.projection_batch_size,
                        stop_when_caught_up=until_caught_up, reset_out_of_range=reset_out_of_range)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("project", help="run a projection (read model, audit trail, decision log)")
    kinds = p.add_subparsers(dest="projection", required=True)
    db = kinds.add_parser("db", help="apply events to the read model (ARBITER_READ_MODEL: rocksdb or postgresql); "
                          "offsets stored with the documents")
    db.add_argument("--rebuild", action="store_true",
                    help="replay the events topic from the beginning into a fresh store, swap it in when caught up, exit")
    db.add_argument("--from-archive", action="store_true",
                    help="with --rebuild: fold the Parquet archive's events first (ARBITER_ARCHIVE_URI, local), then "
                    "read Kafka from the next offset of each partition; refused if the two leave a gap")
    db.add_argument("--group", action="store_true",
                    help="join the consumer group instead of reading every partition, so several instances share "
                    "the partitions of one PostgreSQL read model (refused on rocksdb: each instance's own store "
                    "needs every partition)")
    audit = kinds.add_parser("audit", help="append every event and rejection to the hash-chained audit store")
    logp = kinds.add_parser("log", help="one JSON line per decision to stdout or ARBITER_LOG_FILE")
    for k in (db, audit, logp):
        k.add_argument("--until-caught-up", action="store_true", help="exit once every partition is caught up")
    for k in (db, audit):
        k.add_argument("--reset-out-of-range", choices=RESET_POSITIONS, default=None,
                       help="when a partition's stored position is out of range (records deleted before they were "
                       "read), resume at its earliest or latest offset and record that; without it the projection "
                       "stops with OFFSET_OUT_OF_RANGE")
    db.set_defaults(handler=_db)
    audit.set_defaults(handler=_audit)
    logp.set_defaults(handler=_log)


def _run(s: Settings, cfg: RunnerConfig, projection: Projection, decode: Decoder = codec.decode_outcome) -> int:
    from app.metrics.projections import ProjectionCollector
    from app.metrics.server import serve_metrics

    tracers = traces.provider(s, f"arbiter-project-{projection.name}")  # None unless tracing is configured
    runner = Runner(cfg, projection, decode,
                    tracer=tracers.get_tracer("arbiter.projections") if tracers is not None else None)
    runner.install_signal_handlers()
    metrics = serve_metrics(f"{projection.name} projection", s.metrics_host,
                            s.projection_metrics_ports.get(projection.name, 0), [ProjectionCollector(runner)])
    try:
        stats = runner.run()
    finally:
        if metrics is not None:
            metrics.close()
        if tracers is not None:
            tracers.shutdown()  # flushes the spans still queued
    log.info("%s projection stopped: %d records in %d batches, %d undecodable", projection.name, stats.records,
             stats.batches, stats.undecodable)
    return 0


def _db(args: argparse.Namespace) -> int:
    from app.read_models import open_writer, rebuild_target
    from projections.db import DbProjection
    from projections.rebuild import rebuild_read_model

    s = get_settings()
    if args.rebuild:
        archive = None
        if args.from_archive:
            from projections.archived import local_root
            archive = local_root(s.archive_location)
        res = rebuild_read_model(runner_config(s, "db", (s.topic_events,), assign_all=True), rebuild_target(s), archive)
        print(f"read model rebuilt: {res.generation} ({res.archived} from the archive, {res.stats.records} from Kafka, "
              f"{res.counts.applied} applied, "
              f"{res.counts.gaps} gaps, {res.counts.invalid} invalid) in {res.seconds:.1f}s; now current")
        return 0
    if args.group and s.read_model != "postgresql":
        log.error("db projection: --group needs the shared PostgreSQL read model (ARBITER_READ_MODEL=postgresql)")
        return 2
    cfg = runner_config(s, "db", (s.topic_events,), assign_all=not args.group, until_caught_up=args.until_caught_up,
                        reset_out_of_range=args.reset_out_of_range)
    projection = DbProjection(open_writer(s))
    log.info("db projection: read model on %s", s.read_model)
    code = _run(s, cfg, projection)
    c = projection.counts
    log.info("db projection: applied %d, duplicates %d, gaps %d, invalid %d", c.applied, c.stale, c.gaps, c.invalid)
    return code


def _audit(args: argparse.Namespace) -> int:
    from app.read_models import audit_root
    from app.rescale.generation import ensure_generations_topic
    from app.rules.catalog import ensure_rules_topic
    from projections.audit import AuditProjection
    from projections.audit.deploys import decode_audited

    s = get_settings()
    # the parked-log topic: every redrive and discard of a parked record (app.parked.lot) joins the hash chain; so
    # does every rules deploy (the catalog topic's signed claims: who deployed which version, README "Rules") and
    # every rescale step (the generations topic: docs/operations/rescale.md)
    ensure_rules_topic(s)
    ensure_generations_topic(s)
    cfg = runner_config(s, "audit", (s.topic_events, s.topic_rejections, s.parked_log_topic, s.rules_topic,
                                     s.generations_topic),
                        assign_all=True,
                        until_caught_up=args.until_caught_up, reset_out_of_range=args.reset_out_of_range)
    # a deploy's catalog records (arbiter:rules) and the generation records (arbiter:generation) are chained and
    # indexed, not counted undecodable
    return _run(s, cfg, AuditProjection(audit_root(s), sync=s.projection_sync_writes), decode_audited)


def _log(args: argparse.Namespace) -> int:
    from projections.log import LogProjection

    s = get_settings()
    cfg = runner_config(s, "log", (s.topic_events, s.topic_rejections), assign_all=False,
                        until_caught_up=args.until_caught_up)
    path = s.path(s.log_file) if s.log_file else None
    return _run(s, cfg, LogProjection(path, max_bytes=s.log_file_max_bytes, backups=s.log_file_backups,
                                     sync=s.projection_sync_writes))
