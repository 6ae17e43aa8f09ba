"""One typed place for Arbiter's configuration, read from ``ARBITER_*`` environment variables."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER_SECRET = "change-me-development-only"  # noqa: S105 - refused outside development
#: What Spark tasks and shard servers hold instead of the API's signing secret (``Settings.for_tasks``): no secret,
#: and long enough that nothing mistakes it for a placeholder.
TASK_SECRET = "not-sent-to-spark-tasks-" + "x" * 32  # noqa: S105 - deliberately not a secret
#: The longest lifetime of a development token (`ARBITER_TOKEN_TTL_S`, `arbiter token --ttl`): 7 days.
MAX_TOKEN_TTL_S = 7 * 24 * 3600
#: An issuer's name (`name=url` in ARBITER_OIDC_ISSUER, ARBITER_LOCAL_ISSUER_NAME): principal characters but `:`,
#: at most 32, so `name:sub` splits one way only; empty = a bare issuer.
ISSUER_NAME_PATTERN = r"^([A-Za-z0-9_@+-][A-Za-z0-9._@+-]{0,31})?$"


class Settings(BaseSettings):
    """Arbiter's settings; every field is ``ARBITER_<NAME>`` in the environment.

    Options of librdkafka and Spark pass through untouched, by their own dotted names, as JSON
    objects: ``ARBITER_KAFKA_CONFIG='{"linger.ms": "5"}'``, ``ARBITER_SPARK_CONF='{"spark.ui.enabled": "true"}'``.
    """

    model_config = SettingsConfigDict(env_prefix="ARBITER_", extra="ignore")

    environment: Literal["development", "production"] = "development"

    # --- directories -------------------------------------------------------------------------
    home: Path = Field(default=ROOT, description="Project root; relative directories hang off it.")
    cache_dir: Path = Field(default=Path(".cache"), description="Downloaded jars (git-ignored).")
    var_dir: Path = Field(default=Path("var"), description="Runtime data: broker log dirs, state, pids.")

    # --- Kafka ---------------------------------------------------------------------------------
    kafka_bootstrap: str = Field(default="127.0.0.1:9092", description="Kafka bootstrap servers every component "
                                 "connects to (host:port, comma-separated).")
    kafka_port: int = Field(default=9092, description="Port of the local broker `arbiter kafka start` runs (127.0.0.1).")
    kafka_controller_port: int = Field(default=9093, description="KRaft controller port of the local broker.")
    kafka_heap: str = Field(default="768m", description="JVM heap of the local broker.")
    kafka_jit: Literal["c1", "c2"] = Field(
        default="c2", description="The local broker's JIT: c2 (the JVM's default, tiered up to C2: a broker runs "
        "long and carries every record) or c1 (C1 only: about a third less CPU to start, for brokers that live "
        "minutes, as the tests' do). Kafka's storage formatting tool, run once before a first start, always runs C1.")
    kafka_config: dict[str, str] = Field(default_factory=dict, description="librdkafka options, dotted names.")
    topic_commands: str = Field(default="commands", description="The validator's input, keyed by object id.")
    topic_events: str = Field(default="events", description="Accepted commands, as events, keyed by object id.")
    topic_rejections: str = Field(default="rejections", description="Rejected commands with their reason codes.")
    topic_parked: str = Field(default="", description="Full bytes of commands that did not decode; empty = "
                              "<topic_commands>-parked (docs/operations/parking-lot.md).")
    topic_parked_log: str = Field(default="", description="Redrives and discards of parked records, read by the audit "
                                  "projection; empty = <topic_commands>-parked-log.")
    topic_generations: str = Field(default="", description="The history of the commands topic's generations "
                                   "(`arbiter rescale`, docs/operations/rescale.md); empty = <topic_commands>-generations.")
    output_partitions: int | None = Field(default=None, ge=1, le=10_000, description="Set by a rescaled generation "
                                          "(app.rescale.generation), not by hand: the partitions of the events, "
                                          "rejections and parked topics when the commands topic has another count; "
                                          "unset = partitions.")
    topic_commands_source: str = Field(default="", description="Set by a rescaled generation (app.rescale.generation), "
                                       "not by hand: the configured commands topic, which outputs name in ce_source "
                                       "whatever generation they were decided from; unset = topic_commands.")
    archive_uri: str = Field(default="", description="The Parquet archive (any Hadoop URI: file, s3a://, hdfs://); "
                             "empty = <var_dir>/archive (docs/operations/archive.md).")
    archive_trigger_interval: str = Field(default="1 minute", description="The archive query's micro-batch interval "
                                          "(long by default: each batch is a Parquet file per topic and date).")
    archive_spark_master: str = Field(default="local[1]", description="The archive's own Spark application's master "
                                      "(one core by default: it shares the host with the validator).")
    archive_compact_every_s: float = Field(default=3600.0, ge=0, description="How often the running archive compacts "
                                           "its finished date partitions (local archives; 0 = never: run "
                                           "`arbiter archive compact` yourself).")
    run_archive: bool = Field(default=True, description="Whether `arbiter run` starts the archive as a component "
                              "(`arbiter run --no-archive` for one run).")
    partitions: int = Field(default=8, ge=1, le=10_000, description="Partitions of every topic: the unit of "
                            "parallelism and of validator state, fixed once state exists (a mismatch is refused).")
    replication_factor: int = Field(default=1, ge=1, description="Replicas of each topic Arbiter creates; 3 in "
                                    "production.")
    min_insync_replicas: int = Field(default=1, ge=1, description="min.insync.replicas of each topic; 2 (of 3) in "
                                     "production, so an acknowledged command survives the loss of a broker.")
    retention_ms: int = Field(default=7 * 24 * 3600 * 1000, description="Retention of all three topics.")
    max_message_bytes: int = Field(
        default=1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024,
        description="Topics' max.message.bytes; every other size limit derives from it (app/limits.py).")
    schema_registry_url: str | None = Field(default=None, description="A Confluent-compatible schema registry the "
                                            "validator registers every schema version in at start; unset = none "
                                            "(the API serves a read-only one at /registry).")

    # --- Spark / validator -------------------------------------------------------------------
    spark_master: str = Field(default="local[2]", description="The validator's Spark master: local[N] or a cluster's "
                              "URL (docs/cluster.md).")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Spark options, dotted names.")
    spark_jit: Literal["c1", "c2"] = Field(
        default="c1", description="The Spark JVMs' JIT: c1 (C1 only) or c2 (the JVM's default, tiered up to C2). "
        "On 2 cores C1 cost less CPU per micro-batch with no loss of throughput (docs/benchmarks.md, fifth pass).")
    validator_codegen: Literal["interpreted", "compiled"] = Field(
        default="interpreted", description="How the validator's Spark session builds its row projections: "
        "interpreted (spark.sql.codegen.factoryMode=NO_CODEGEN, spark.sql.codegen.wholeStage=false) or compiled "
        "(Spark's default: Java source generated per task, per Kafka partition reader and per batch plan). The "
        "generation was ~36 % of the driver JVM's sampled CPU at 100 commands/s (JFR; docs/benchmarks.md, "
        "\"The validator's JVM per micro-batch\"). Either key set in spark_conf wins over this.")
    state_backend: Literal["spark", "rocksdb"] = Field(
        default="rocksdb", description="Validator state: Spark's transformWithState (reference) or per-partition rocksdict.")
    checkpoint_location: str = Field(
        default="", description="Spark checkpoint URI (any Hadoop-supported URI); empty = <var_dir>/checkpoints/validator.")
    trigger_interval: str = Field(
        default="100 milliseconds", description="Micro-batch trigger interval: a command waits up to this long for its batch. "
        "Idle cost, driver JVM + broker (bench.validator.idle): 1 s ~7 % of a core, 100 ms ~18 %, 0 s ~48 %.")
    max_offsets_per_trigger: int | None = Field(
        default=None, ge=1, description="Cap on commands read per micro-batch; unset = derived from batch_memory_mb "
        "(app/validator/source.py, offsets_per_trigger), so the first batch after an outage is bounded.")
    batch_memory_mb: int | None = Field(
        default=None, ge=1, description="Memory one micro-batch may take on a host, all its copies together; unset = "
        "an eighth of this host's physical memory. Only used to derive the default max_offsets_per_trigger.")
    min_offsets_per_trigger: int | None = Field(
        default=None, ge=1, description="Skip a trigger with fewer new commands than this until max_trigger_delay_ms "
        "has passed since the last micro-batch (Spark's minOffsetsPerTrigger): fewer batches under light load.")
    max_trigger_delay_ms: int = Field(default=300, ge=1, description="Longest wait for min_offsets_per_trigger.")
    starting_offsets: Literal["earliest", "latest"] = Field(
        default="earliest", description="Where a validator without a checkpoint starts reading commands.")
    shuffle_partitions: int | None = Field(
        default=None, description="Spark shuffle partitions of the stateful step; default = partitions. Fixed by the first run.")
    dedup_ttl_ms: int = Field(default=24 * 3600 * 1000, ge=1, description="How long a command id is remembered for dedup.")
    tombstone_ttl_ms: int = Field(default=30 * 24 * 3600 * 1000, ge=1, description="How long a deleted object's state is kept.")
    # --- one writer across hosts (app/validator/lease.py) ----------------------------------------
    validator_lease: bool = Field(
        default=True, description="Take the checkpoint's lease (a Kafka consumer group) before starting the query, so "
        "a second driver on any host is refused; off, only the same-host job lock guards the checkpoint.")
    topic_rules: str = Field(default="", description="One-partition catalog of deployed rules versions (who, what, "
                             "when); empty = <topic_commands>-rules (README \"Rules\").")
    topic_validator_leases: str = Field(default="arbiter-validator-leases", description="One-partition lease topic.")
    topic_claims: str = Field(default="", description="The API's signed claims of Idempotency-Keys, keyed by principal: "
                              "the first claim of a key names the one object it may change (app/api/writes/claims.py); "
                              "empty = <topic_commands>-claims.")
    lease_session_timeout_ms: int = Field(
        default=10_000, ge=1000, description="A lease holder that sends no heartbeat for this long (crash, network "
        "partition) loses the lease; another driver gets it this long after the holder's last heartbeat.")
    lease_max_poll_interval_ms: int = Field(default=30_000, ge=1000, description="A holder whose lease thread does "
                                            "not poll for this long is fenced too.")
    lease_acquire_timeout_s: float | None = Field(
        default=None, gt=0, description="How long a starting driver waits for the lease; unset = twice the session.")

    # --- rocksdb state backend (app/validator/rocks) -------------------------------------------
    rocks_dir: Path = Field(
        default=Path(""), description="Local shard databases; empty = <var_dir>/rocks. A cache of the checkpoint.")
    rocks_memory_mb: int = Field(default=256, ge=8, description="Block cache per process, shared by all shards.")
    rocks_write_buffer_mb: int = Field(default=64, ge=4, description="Memtable budget per process, charged to the cache.")
    snapshot_every: int = Field(default=50, ge=1, description="Upload a shard snapshot after this many changelogs.")
    snapshots_kept: int = Field(default=2, ge=1, description="Snapshots kept per shard at the checkpoint location.")
    shard_tasks: int | None = Field(
        default=None, ge=1, description="Spark tasks per micro-batch the shards are spread over (whole partitions each, "
        "no shuffle); unset = the cores in local mode (fewer tasks, less per-task overhead), one per partition on a "
        "cluster (each keeps its executor, so shards stay put).")
    shard_lock_timeout_s: float = Field(default=60.0, gt=0, description="How long a task waits for its shard's lock.")
    checkpoint_fsync: bool = Field(
        default=True, description="fsync each shard changelog written to a local checkpoint directory before its "
        "rename. Off, a changelog is as durable as Spark's own offset and commit logs there (written and renamed, "
        "not fsynced): safe across a killed process, not across a machine crash.")
    shard_servers: int | None = Field(
        default=None, ge=1, le=256, description="Shard server processes per host (partition p is served by lane "
        "p mod this); unset = min(partitions, this host's cores). They keep shards open between micro-batches.")
    shard_request_timeout_s: float = Field(
        default=600.0, gt=0, description="A Spark task whose shard server sends nothing for this long (stalled: "
        "stopped, swapping, stuck on a disk) fails with SHARD_SERVER_TIMEOUT instead of waiting forever. Must exceed "
        "the slowest legitimate request: a restore from a snapshot plus the largest micro-batch.")
    shard_server_idle_s: float = Field(
        default=300.0, gt=0, description="A shard server with no request for this long closes its shards and exits.")
    core: Literal["auto", "off"] = Field(
        default="auto", description="Where the shard servers decide commands: auto = through the compiled core "
        "(core/, Rust) when a build of its current sources exists and passed its corpus check (arbiter native build), "
        "keys it does not decide (rules in force, undecodable records, ...) by the Python fold; off = the Python fold "
        "only. Both write the same bytes (tests/unit/test_core_differential.py).")
    shard_state_cache_mb: int = Field(
        default=64, ge=0, description="Decoded object states an open shard keeps in memory (least recently used go "
        "first; size estimated as 4x the stored bytes), so a hot object's state is not decoded again for each "
        "batch; 0 = none. Per shard.")

    # --- projections (issue 7): empty dirs default to <var_dir>/audit; read_model_dir is in the API block below ---
    audit_dir: Path | None = Field(default=None, description="Audit store (rocksdict with per-partition hash chains).")
    log_file: Path | None = Field(default=None, description="Decision log file (rotated); unset = stdout.")
    log_file_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, description="Size at which the log "
                                    "projection rotates ARBITER_LOG_FILE.")
    log_file_backups: int = Field(default=5, ge=0, description="Rotated decision-log files kept.")
    projection_group_prefix: str = Field(default="arbiter", description="Consumer groups are <prefix>-db|audit|log.")
    projection_batch_size: int = Field(default=2000, ge=1, le=100_000, description="Most records a projection "
                                       "applies in one batch.")
    projection_sync_writes: bool = Field(default=True, description="fsync the read model/audit WAL per batch.")

    # --- metrics (issue 16): Prometheus text format on a port of each process's own; 0 = not served ---
    metrics_host: str = Field(default="127.0.0.1", description="Address the validator's and projections' /metrics "
                              "bind to (loopback; 0.0.0.0 for a scraper on another host or container).")
    validator_metrics_port: int = Field(default=9108, ge=0, le=65535, description="`arbiter validator`'s /metrics.")
    projection_metrics_ports: dict[str, int] = Field(
        default_factory=lambda: {"db": 9109, "audit": 9110, "log": 9111},
        description='/metrics of `arbiter project <kind>`, per kind (JSON: \'{"db": 9109}\'); absent or 0 = not served.')
    traces: bool | None = Field(
        default=None, description="OpenTelemetry traces over OTLP/HTTP (app/traces.py): true/false; unset = on iff "
        "OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.")

    # --- API -------------------------------------------------------------------------------------
    api_host: str = Field(default="127.0.0.1", description="Address the API binds (`arbiter api`, `arbiter run`).")
    api_port: int = Field(default=8000, description="Port of the API: its routes, /metrics and the status page.")
    api_workers: int = Field(
        default=1, ge=1, le=64, description="uvicorn worker processes of `arbiter api` (and `arbiter run`'s API); each "
        "has its own producer and outcome consumer, so a write's wait is answered by the process that took it.")
    auth_secret: SecretStr = SecretStr(PLACEHOLDER_SECRET)
    # --- API (issue 6: app/api/) --------------------------------------------------------------
    token_ttl_s: int = Field(default=8 * 3600, ge=1, le=MAX_TOKEN_TTL_S,
                             description="Lifetime of the development tokens `arbiter token` signs (seconds; at most "
                             "MAX_TOKEN_TTL_S, 7 days).")
    max_body_bytes: int = Field(default=1024 * 1024, ge=1, description="Largest request body of POST /commands:batch "
                                "(and the ceiling of every other route's); larger is 413.")
    max_object_body_bytes: int | None = Field(
        default=None, ge=1, description="Largest request body of every route but the batch route; unset = the largest "
        "document (app/limits.py) + 1 KiB for the envelope, never above max_body_bytes. Larger is 413.")
    api_fast_writes: bool = Field(default=True, description="Serve the common case of POST /objects and PATCH/DELETE "
                                  "/objects/{id} as plain ASGI (app/api/writes/fast_writes.py): same checks and answers, "
                                  "less CPU per write; false sends every request through the FastAPI routes.")
    batch_max_commands: int = Field(default=50_000, ge=1, description="Most commands in one POST /commands:batch.")
    produce_timeout_s: float = Field(default=10.0, gt=0, description="Delivery wait before a write answers 503.")
    retry_after_s: int = Field(default=2, ge=1, description="Retry-After of a 503.")
    wait_max_s: float = Field(default=30.0, ge=0, description="Cap on `Prefer: wait=<seconds>`.")
    min_position_wait_s: float = Field(default=5.0, ge=0, description="Longest a GET with Arbiter-Min-Position waits "
                                       "for the read model to pass it before answering 503 POSITION_NOT_REACHED.")
    outcome_cache_size: int = Field(default=200_000, ge=1, description="Most command ids kept for GET /commands/{id}.")
    read_model_dir: Path | None = Field(default=None, description="DB projection's read model; empty = <var_dir>/read_model.")
    # --- read model backend (issue 17) --------------------------------------------------------
    read_model: Literal["rocksdb", "postgresql"] = Field(
        default="rocksdb", description="Where the DB projection keeps the read model: embedded RocksDB (read as a "
        "secondary on the same host) or PostgreSQL (one store for every API host, and for SQL).")
    postgres_dsn: SecretStr | None = Field(
        default=None, description="libpq connection string or URI of the read model's database; unset = the local "
        "server of `arbiter postgres start` (127.0.0.1:postgres_port, its generated password).")
    postgres_schema: str = Field(default="read_model", pattern=r"^[a-z_][a-z0-9_]{0,40}$",
                                 description="Schema holding the read model's tables; a rebuild swaps it by renaming.")
    postgres_port: int = Field(default=5433, ge=1, le=65535, description="Port of the local PostgreSQL server.")
    postgres_dir: Path | None = Field(default=None, description="Local PostgreSQL server's files; empty = <var_dir>/postgres.")
    postgres_pool_size: int = Field(default=4, ge=1, le=100, description="Connections per process in the read pool.")
    # --- API (issue 13: gate integrity) -----------------------------------------------------------
    outcome_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=64 * 1024,
                                     description="Memory bound (estimated bytes) of the outcome summaries kept per API process.")
    # --- API (issue 29: the change feed, GET /changes and /objects/{id}/changes) -----------------------
    changes_max_subscribers: int = Field(default=1000, ge=1, description="Most change streams open at once per API "
                                         "process; beyond it 503 TOO_MANY_SUBSCRIBERS.")
    changes_max_per_principal: int = Field(default=16, ge=1, description="Most change streams one principal holds "
                                           "open per API process; beyond it 429 TOO_MANY_SUBSCRIPTIONS.")
    changes_queue_events: int = Field(default=1000, ge=1, description="Live events queued for one stream; a stream "
                                      "whose client falls this far behind is ended with a `reset` (SLOW_CONSUMER).")
    changes_queue_bytes: int = Field(default=16 * 1024 * 1024, ge=1, description="Bytes of live events (their "
                                     "frames' data) queued for one stream; one more and the stream is ended with a "
                                     "`reset` (SLOW_CONSUMER). Keep it above the largest event's.")
    changes_total_bytes: int = Field(default=256 * 1024 * 1024, ge=1, description="Bytes of live events queued for "
                                     "all the streams of one API process; one more and the stream holding the most "
                                     "is ended with a `reset` (SLOW_CONSUMER).")
    changes_heartbeat_s: float = Field(default=15.0, gt=0, description="A comment line on a stream idle this long.")
    changes_roles_wait_s: float = Field(default=5.0, ge=0, description="Longest the change feed waits for the audit "
                                        "projection to hold an object's earlier events (who may read it).")
    changes_roles_cache: int = Field(default=100_000, ge=1, description="Objects whose roles the live feed keeps.")
    # --- API (issue 40: browsers: CORS and change-feed tickets, app/api/http/cors.py, app/api/callers/tickets.py) ---------
    cors_allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Origins (scheme://host[:port]) whose pages may call the API from a browser "
        "(CORS); separated by spaces or commas. Empty = none: no cross-origin answer is readable.")
    changes_ticket_ttl_s: float = Field(default=30.0, gt=0, le=300, description="How long a change-feed ticket "
                                        "(POST /changes/tickets) may open its first stream.")
    changes_ticket_resume_s: float = Field(default=30.0, ge=0, le=300, description="How long after a ticket's "
                                           "stream ended the browser may resume it (Last-Event-ID) with that ticket.")
    max_waiters: int = Field(default=10_000, ge=1, description="Most concurrent `Prefer: wait` requests per API process; "
                             "beyond it a write is refused before it is produced: 503 TOO_MANY_WAITERS.")
    # --- API (issue 25: fair shares per principal, per API process) ----------------------------------
    write_rate: float = Field(default=1000.0, ge=0, description="Commands a second one principal may write (a batch "
                              "of N costs N); beyond its burst a write is 429 RATE_LIMITED. 0 = no limit.")
    write_burst: int = Field(default=50_000, ge=1, description="Commands one principal may write at once; also the "
                             "most commands of one batch while write_rate is on (a larger batch is 413).")
    read_rate: float = Field(default=5000.0, ge=0, description="GETs of objects and outcomes a second per principal; "
                             "0 = no limit.")
    read_burst: int = Field(default=10_000, ge=1, description="GETs one principal may send at once.")
    rate_principals: int = Field(default=100_000, ge=1, description="Most principals whose buckets are held; idle "
                                 "(refilled) ones are dropped as requests come, and beyond this the least recent.")
    waiter_share: float = Field(default=0.25, gt=0, le=1, description="Share of max_waiters one principal may hold; "
                                "its further Prefer: wait writes are produced and answered 202 without waiting.")
    outcome_cache_share: float = Field(default=0.25, gt=0, le=1, description="Share of the outcome cache (entries "
                                       "and bytes) one principal's outcomes may hold; beyond it its own oldest go.")
    max_keys_per_principal: int = Field(default=100_000, ge=1, description="Most Idempotency-Keys one principal may "
                                        "hold at once (each for dedup_ttl after its first claim); a write with one more "
                                        "is 429 TOO_MANY_IDEMPOTENCY_KEYS. Every API process must use the same value.")
    # --- identity (issue 27: app/api/callers/auth.py, tokens.py, local_issuer.py, identity.py) -----------------
    oidc_issuer: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Trusted OIDC issuers (their `iss`; keys found by discovery), separated "
        "by spaces or commas. `name=url` namespaces the issuer's principals and groups, always (`name:sub`, "
        "`group:name:<group>`); a bare `url` keeps bare names, and at most one trusted issuer may be bare (see "
        "ARBITER_LOCAL_ISSUER_NAME). Empty: only Arbiter's own issuer.")
    oidc_groups_issuers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["*"], description="The issuers (by name, or by `iss` for a bare one) whose groups "
        "claim is believed; `*` = every trusted issuer. A token of any other issuer has no groups.")
    oidc_audience: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["arbiter"], description="Accepted `aud` values; the first is the audience of "
        "Arbiter's own tokens.")
    oidc_principal_claim: str = Field(default="sub", description="The claim that names the principal.")
    oidc_groups_claim: str = Field(default="groups", description="The claim that lists the caller's groups.")
    oidc_algorithms: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["RS256", "ES256", "EdDSA"], description="Accepted JWS algorithms: asymmetric "
        "only (never none or HS*).")
    oidc_leeway_s: int = Field(default=60, ge=0, le=600, description="Clock skew allowed on exp, nbf and iat.")
    oidc_jwks_cache_s: float = Field(default=300, gt=0, description="How long a fetched JWKS is used.")
    oidc_jwks_refresh_min_s: float = Field(default=30, ge=0, description="Least time between two lookups of an "
                                           "issuer's JWKS that tokens with an unknown kid start (start-up and "
                                           "cache-expiry fetches do not count); meanwhile another unknown kid is "
                                           "503 with Retry-After.")
    oidc_jwks_retry_s: float = Field(default=5, ge=0, description="Least time between a failed fetch of an "
                                     "issuer's discovery document or JWKS and the next try; meanwhile a token "
                                     "whose key is not in the last good JWKS is 503 with Retry-After.")
    oidc_http_timeout_s: float = Field(default=5, gt=0, description="Timeout of discovery and JWKS requests.")
    oidc_max_groups: int = Field(default=32, ge=0, le=32, description="Most groups of a caller copied into a "
                                 "command (sorted; longer names than 64 characters are left out).")
    token_cache_size: int = Field(default=10_000, ge=1, description="Verified tokens kept per API process until "
                                  "they expire (least recently used go first).")
    local_issuer: bool | None = Field(
        default=None, description="Trust Arbiter's own development issuer (keys in <var_dir>/identity); unset = "
        "only when ARBITER_OIDC_ISSUER is empty.")
    local_issuer_id: str = Field(default="urn:arbiter:local", max_length=256,
                                 description="The `iss` of Arbiter's own tokens.")
    local_issuer_name: str = Field(
        default="", pattern=ISSUER_NAME_PATTERN, description="The namespace of Arbiter's own issuer's principals "
        "and groups, as `name=` names a provider's; empty = bare names (then every provider must be named).")
    public_url: str | None = Field(
        default=None, pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$", description="The API's address as clients "
        "reach it (scheme, host, port, path prefix): the base of the URLs in /.well-known/openid-configuration and "
        "/asyncapi.json, never taken from a request's Host header; unset = http://<api_host>:<api_port>.")
    # --- signed command records (issue 27: app/signing.py) -------------------------------------------
    record_keys: dict[str, SecretStr] = Field(
        default_factory=dict, description='Keys that sign command records, by id (JSON: \'{"k2": "<secret>"}\'); '
        "empty = one key derived from ARBITER_AUTH_SECRET. Keep the old key here until its records are decided.")
    record_key_id: str | None = Field(default=None, description="The id of the key that signs (required when "
                                      "ARBITER_RECORD_KEYS holds several).")
    allow_unsigned_commands: bool = Field(
        default=False, description="Let the validator decide command records without a valid signature (other "
        "producers than Arbiter's); off, they are rejected UNAUTHENTICATED.")

    @field_validator("oidc_issuer", "oidc_audience", "oidc_algorithms", "cors_allow_origins", "oidc_groups_issuers",
                     mode="before")
    @classmethod
    def _words(cls, value: Any) -> Any:  # noqa: ANN401 - pydantic's validator signature
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("[") else [w for w in text.replace(",", " ").split() if w]
        return value

    @field_validator("cors_allow_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", origin) or origin.endswith((":", "/")):
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], no path, no wildcard)")
        return value

    @property
    def trusts_local_issuer(self) -> bool:
        return self.local_issuer if self.local_issuer is not None else not self.oidc_issuer

    @property
    def public_base_url(self) -> str:
        """Return the API's address as clients reach it: ``public_url``, else its bind address (loopback for a
        wildcard bind), without a trailing slash."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.api_host in ("0.0.0.0", "::", "") else self.api_host  # noqa: S104 - compared
        return f"http://[{host}]:{self.api_port}" if ":" in host else f"http://{host}:{self.api_port}"

    @model_validator(mode="after")
    def _refuse_placeholder_secret(self) -> Settings:
        if self.environment == "production" and self.auth_secret.get_secret_value() == PLACEHOLDER_SECRET:
            raise ValueError("ARBITER_AUTH_SECRET still holds the development placeholder; set a real secret")
        return self

    def for_tasks(self) -> Settings:
        """Return these settings without secrets, for everything shipped to Spark tasks (pickled) or shard servers.

        Tasks never sign tokens, open the read model or a Kafka client of their own: ``ARBITER_AUTH_SECRET``,
        the PostgreSQL DSN (it may carry a password) and the librdkafka pass-through (``sasl.password``, ...)
        stay on the driver. Tasks do check command records' signatures, so the record keys go with them (the
        derived key, not the secret it is derived from).
        """
        keys = {kid: SecretStr(k) for kid, k in self.record_secrets().items()}
        return self.model_copy(update={"auth_secret": SecretStr(TASK_SECRET), "postgres_dsn": None,
                                       "kafka_config": {}, "record_keys": keys})

    def record_secrets(self) -> dict[str, str]:
        """Return the command-record signing keys by id: ``record_keys``, else one (``derived``) derived from
        ``auth_secret`` by HMAC, so the derived key can go to Spark tasks without the secret (app/signing.py)."""
        if self.record_keys:
            return {kid: secret.get_secret_value() for kid, secret in self.record_keys.items()}
        digest = hmac.new(self.auth_secret.get_secret_value().encode("utf-8"), b"arbiter record signing key v1",
                          hashlib.sha256).digest()
        return {"derived": base64.urlsafe_b64encode(digest).decode("ascii")}

    def path(self, p: Path) -> Path:
        """Resolve a configured directory against ``home`` unless it is absolute."""
        return p if p.is_absolute() else self.home / p

    @property
    def parked_topic(self) -> str:
        return self.topic_parked or f"{self.topic_commands}-parked"

    @property
    def rules_topic(self) -> str:
        return self.topic_rules or f"{self.topic_commands}-rules"

    @property
    def claims_topic(self) -> str:
        return self.topic_claims or f"{self.topic_commands}-claims"

    @property
    def generations_topic(self) -> str:
        return self.topic_generations or f"{self.topic_commands}-generations"

    @property
    def parked_log_topic(self) -> str:
        return self.topic_parked_log or f"{self.topic_commands}-parked-log"

    @property
    def archive_location(self) -> str:
        """The archive's root URI: ``archive_uri``, or ``<var_dir>/archive``."""
        return self.archive_uri or str(self.path(self.var_dir) / "archive")

    @property
    def jars_dir(self) -> Path:
        return self.path(self.cache_dir) / "jars"

    @property
    def kafka_dir(self) -> Path:
        return self.path(self.var_dir) / "kafka"

    @property
    def postgres_dir_path(self) -> Path:
        return self.path(self.postgres_dir) if self.postgres_dir else self.path(self.var_dir) / "postgres"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process-wide settings, read once from the environment."""
    return Settings()


def checkpoint_uri(settings: Settings) -> str:
    """The validator's checkpoint location: the configured URI, or a local directory under ``var_dir``."""
    return settings.checkpoint_location or str(settings.path(settings.var_dir) / "checkpoints" / "validator")
