"""``arbiter run``: the whole pipeline on embedded defaults, a scripted scenario, then serve until Ctrl-C.

A component that exits after start-up is restarted with backoff while the others, the API included, keep running;
its failures are printed and published in ``<var_dir>/status/components.json`` for the status page.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

import httpx

from app.api.callers.auth import OPERATE, READ
from app.api.callers.identity import dev_token
from app.api.callers.secret_policy import is_loopback
from app.local.kafka_broker import LocalBroker
from app.local.postgres_server import LocalPostgres
from app.run.restart import components_path
from app.run.scenario import Scenario, table
from app.run.supervisor import Service, Supervisor, arbiter_argv
from app.settings import Settings, get_settings
from app.topics import ensure_topics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="start broker, validator, projections, API and archive; play a scenario; serve until Ctrl-C")
    p.add_argument("--exit-after-scenario", action="store_true", help="stop everything once the scenario is shown")
    p.add_argument("--no-scenario", action="store_true", help="only start the pipeline")
    p.add_argument("--read-model", choices=["rocksdb", "postgresql"], default=None,
                   help="the DB projection's backend (default ARBITER_READ_MODEL, rocksdb); postgresql starts the "
                        "local server unless ARBITER_POSTGRES_DSN names one")
    p.add_argument("--no-archive", dest="archive", action="store_false", default=None,
                   help="do not start the Parquet archive (default ARBITER_RUN_ARCHIVE, true)")
    p.set_defaults(handler=_run)


def _log_says(path: Path, text: str) -> bool:
    try:
        return text in path.read_text(errors="replace")
    except FileNotFoundError:
        return False


def _say(message: str) -> None:
    print(message, flush=True)


def _healthy(url: str) -> bool:
    return httpx.get(url, timeout=2.0).status_code == 200


def _local_broker(s: Settings) -> LocalBroker | None:
    """The embedded broker when the bootstrap points at it; None when the user brought their own Kafka."""
    broker = LocalBroker.from_settings(s)
    return broker if s.kafka_bootstrap == broker.bootstrap else None


def _local_postgres(s: Settings) -> LocalPostgres | None:
    """The local PostgreSQL server when the read model is on PostgreSQL and no DSN names another."""
    if s.read_model != "postgresql" or (s.postgres_dsn is not None and s.postgres_dsn.get_secret_value()):
        return None
    return LocalPostgres.from_settings(s)


def _run(args: argparse.Namespace) -> int:
    if args.read_model is not None:
        os.environ["ARBITER_READ_MODEL"] = args.read_model  # the children read it from their environment
        get_settings.cache_clear()
    s = get_settings()
    var = s.path(s.var_dir)
    sup = Supervisor(var / "run", var / "logs", status_file=components_path(s), report=_say)
    broker = _local_broker(s)
    started_broker = False
    postgres = _local_postgres(s)
    started_postgres = False
    # Ctrl-C must work even when SIGINT was inherited as ignored (e.g. started in the background by a script);
    # SIGTERM means the same. Both raise KeyboardInterrupt, so a stop during start-up also cleans up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    api_url = f"http://{s.api_host}:{s.api_port}"
    t0 = time.monotonic()
    try:
        if broker is not None:
            print(f"[1/6] Kafka broker on {broker.bootstrap} (data {broker.directory}) ...", flush=True)
            started_broker = broker.running_pid() is None
            pid = broker.start(s)
            print(f"      ready (pid {pid}{'' if started_broker else ', already running'})")
        else:
            print(f"[1/6] using the Kafka cluster at {s.kafka_bootstrap}")
        if postgres is not None:
            print(f"      PostgreSQL for the read model on 127.0.0.1:{postgres.port} (data {postgres.data}) ...", flush=True)
            started_postgres = postgres.running_pid() is None
            pid = postgres.start()
            print(f"      ready (pid {pid}{'' if started_postgres else ', already running'})")
        print(f"[2/6] topics {s.topic_commands}, {s.topic_events}, {s.topic_rejections} "
              f"({s.partitions} partitions) ...", flush=True)
        ensure_topics(s)
        print(f"[3/6] validator (Spark {s.spark_master}, state backend {s.state_backend}) ...", flush=True)
        validator = Service("validator", arbiter_argv("validator"), timeout=240,
                            ready=lambda: _log_says(sup.log_of("validator"), "validator started"))
        archive = Service("archive", arbiter_argv("archive", "run"), timeout=240,
                          ready=lambda: _log_says(sup.log_of("archive"), "archive started"))
        sup.spawn(validator)
        if s.run_archive if args.archive is None else args.archive:
            # its own Spark JVM starts beside the validator's, not after the projections and the API
            sup.spawn(archive)
        sup.wait_ready(validator)
        print(f"[4/6] projections: db (read model on {s.read_model}), audit, log ...", flush=True)
        for kind in ("db", "audit", "log"):
            sup.start(Service(f"project-{kind}", arbiter_argv("project", kind), timeout=60,
                              ready=lambda k=kind: _log_says(sup.log_of(f"project-{k}"), "projection: assigned")))
        print(f"[5/6] API on {api_url} ...", flush=True)
        sup.start(Service("api", arbiter_argv("api"), timeout=60, ready=lambda: _healthy(f"{api_url}/healthz")))
        if archive.proc is not None:
            print(f"      archive to {s.archive_location} (its own Spark, {s.archive_spark_master}, every "
                  f"{s.archive_trigger_interval}) ...", flush=True)
            sup.wait_ready(archive)
        print(f"      pipeline up in {time.monotonic() - t0:.0f}s; logs in {var / 'logs'}")
        sup.monitor()  # from here on a component that exits is restarted, the scenario's time included
        if not args.no_scenario:
            _scenario(s, api_url)
        print(f"\nAPI docs: {api_url}/docs")
        for line in closing_hints(s, api_url):
            print(line)
        if args.exit_after_scenario:
            return 0
        print("Serving; press Ctrl-C to stop every process started here. A component that exits is restarted "
              f"(backoff {sup.backoff.initial:g} s doubling to {sup.backoff.cap:g} s); "
              f"health in {components_path(s)}.", flush=True)
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("\nstopping ...", flush=True)
        sup.stop_all()
        if broker is not None and started_broker:
            broker.stop()
        if postgres is not None and started_postgres:
            postgres.stop()
        print("stopped every process started by this run.")


def closing_hints(s: Settings, api_url: str) -> list[str]:
    """Return the status-page link and token lines ``arbiter run`` prints once the pipeline is up.

    Tokens only on a development terminal (loopback) and only of Arbiter's own issuer; otherwise (a provider's
    tokens, or not development) the link says which token it needs.
    """
    if s.environment == "development" and is_loopback(s.api_host) and s.trusts_local_issuer:
        return [f"Status page: {api_url}/#token={dev_token(s, 'operator', (OPERATE, READ))}",
                f"Development token (principal alice): {dev_token(s, 'alice')}"]
    return [f"Status page: {api_url}/#token=<a token with the scope arbiter:operate>"]


def _scenario(s: Settings, api_url: str) -> None:
    print("[6/6] scenario: two users, one shared document ...", flush=True)
    sc = Scenario(s, api_url)
    sc.warm_up()
    rows = sc.play()
    print()
    print(table(rows))
    print("\nRead model afterwards (GET /objects/{id} by each object's owner, from the DB projection):")
    for oid, status, body in sc.read_model({sc.doc: None, sc.notes: 2}):
        print(f"  {oid:<16} HTTP {status}  {body}")
    print(f"\nHistory of {sc.doc} as its owner reads it (GET /objects/{{id}}/events?include=rejections, alice):")
    for line in sc.history(sc.doc, "alice"):
        print(f"  {line}")
    if sc.live is not None:
        print(f"\nLive change feed (GET /objects/{{id}}/changes, bob, opened on {sc.notes} before his update):")
        for line in sc.live.result():
            print(f"  {line}")
