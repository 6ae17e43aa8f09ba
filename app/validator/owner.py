"""One writer per checkpoint: the same-host job lock and the cross-host lease, held while the validator query runs.

Order on start: the lease's check (refuses a live holder with another instance id, without joining), the
same-host ``flock`` (two drivers of one instance id would fence each other, so only one may get past it),
then the lease itself. Both are released when the query ends; a lost lease stops the query.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.settings import Settings
from app.validator.lease import (
    TAKEN,
    LeaseConfig,
    LossCause,
    ValidatorLease,
    client_id,
    instance_id,
    local_host,
)
from app.validator.lock import FileLock, acquire_job_lock, job_lock_path, rocks_root

log = logging.getLogger("arbiter.validator")


def lease_config(settings: Settings, checkpoint: str) -> LeaseConfig:
    """Return this driver's lease on ``checkpoint``: its instance is (host, local state directory, checkpoint)."""
    host = local_host()
    session = settings.lease_session_timeout_ms
    return LeaseConfig(
        bootstrap=settings.kafka_bootstrap, topic=settings.topic_validator_leases, checkpoint=checkpoint,
        instance_id=instance_id(host, rocks_root(settings, checkpoint), checkpoint),
        client_id=client_id(host, os.getpid()), session_timeout_ms=session,
        max_poll_interval_ms=settings.lease_max_poll_interval_ms,
        acquire_timeout_s=settings.lease_acquire_timeout_s or 2 * session / 1000,
        kafka_config={k: v for k, v in settings.kafka_config.items() if k.startswith(("security.", "sasl.", "ssl."))})


class Ownership:
    """The job lock and (unless disabled) the lease one query holds; ``release`` gives both up."""

    def __init__(self, checkpoint: str, lock: FileLock, lease: ValidatorLease | None, spark: Any = None) -> None:  # noqa: ANN401
        self.checkpoint, self.lock, self.lease = checkpoint, lock, lease
        self.spark = spark  # the session whose JVM hands the lease over on release (``leave_group``)
        self.query: Any = None
        self._guard = threading.Lock()
        self._release_lock = threading.Lock()  # one release at a time; a second caller waits for the first
        self._released = False

    @property
    def lost(self) -> str | None:
        """Why the lease was lost while the query ran, or None."""
        return self.lease.lost_reason if self.lease is not None else None

    def fenced(self, reason: str) -> None:
        """Stop the query: this driver no longer holds the lease, so it must not write another batch.

        Whether another driver owns the checkpoint now or this one was only cut off from Kafka is asked of the
        coordinator after the query has stopped (``loss_cause``), not before: stopping must not wait for it.
        """
        log.error("validator lost its lease: %s; stopping the query on %s", reason, self.checkpoint)
        with self._guard:
            query = self.query
        if query is not None:
            with _owners_guard:
                _fenced[str(query.id)] = (reason, self.lease)
            try:
                query.stop()
            except Exception as e:  # noqa: BLE001 - the session may be gone; the lease is released either way
                log.warning("stopping the fenced query: %s", e)

    def release(self) -> None:
        """Give up the lease and the job lock. A lease still held is handed over at once: this driver's static
        member is removed from the group (``leave_group``, while the session's JVM is up) instead of expiring a
        session later, so a driver on another host can start right after a clean stop.

        Idempotent, and a second caller (the query's watch, ``release_after``, ``_reclaim`` of a new query on
        the same checkpoint) returns only once the first has finished: the job lock is let go last, after the
        member removal, so a new query of this process never joins as this instance while it is being removed.
        """
        with self._release_lock:
            if not self._released:
                self._release()
                self._released = True

    def _release(self) -> None:
        lease, spark = self.lease, self.spark
        if lease is not None:
            held = lease.held
            lease.release()
            if held and spark is not None:
                try:
                    leave_group(spark, lease.config)
                except Exception as e:  # noqa: BLE001 - the member then expires with its session, as after a crash
                    log.warning("could not remove this driver from lease group %s (%s); another driver gets the "
                                "lease %g s after this one stopped", lease.config.group, e,
                                lease.config.session_timeout_ms / 1000)
        self.lock.release()


def leave_group(spark: Any, config: LeaseConfig) -> None:  # noqa: ANN401
    """Remove this driver's static member from its lease group with Kafka's Java admin client in Spark's JVM.

    librdkafka's static members do not leave their group on close (that is what lets a restart after
    ``kill -9`` take the lease back at once), and confluent-kafka does not offer Kafka's remove-members call;
    the ``kafka-clients`` jar the Spark Kafka connector brings does (``Admin.removeMembersFromConsumerGroup``).
    """
    jvm = spark._jvm
    admin_pkg = jvm.org.apache.kafka.clients.admin
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", config.bootstrap)
    for k, v in config.kafka_config.items():
        props.put(k, str(v))
    admin = admin_pkg.Admin.create(props)
    try:
        members = jvm.java.util.Collections.singleton(admin_pkg.MemberToRemove(config.instance_id))
        admin.removeMembersFromConsumerGroup(config.group, admin_pkg.RemoveMembersFromConsumerGroupOptions(members)) \
            .all().get(10, jvm.java.util.concurrent.TimeUnit.SECONDS)
    finally:
        admin.close()
    log.info("left lease group %s (member %s): another driver may take the checkpoint now", config.group,
             config.instance_id)


_owners: dict[str, Ownership] = {}  # by query id: what the queries this process started hold
_fenced: dict[str, tuple[str, ValidatorLease | None]] = {}  # by query id: why a query was stopped, and its lease
_owners_guard = threading.Lock()


def _reclaim(spark: Any, path: Path) -> None:  # noqa: ANN401
    """Release what this process holds on ``path`` for a query that has ended but whose watch has not noticed yet."""
    with _owners_guard:
        ended = [(qid, o) for qid, o in _owners.items() if o.lock.path == path and spark.streams.get(qid) is None]
    for qid, o in ended:
        o.release()  # waits if the query's watch is releasing it right now
        _forget(qid)


def check_lease(settings: Settings, checkpoint: str) -> None:
    """Raise ``CheckpointLeased`` if another driver's instance holds ``checkpoint``'s lease (no join, no Spark).

    ``arbiter validator`` asks before it starts Spark's JVM: a second driver is refused in about a second instead
    of after the seconds (tens of seconds on a busy host) a JVM takes to start. ``take`` asks again: a driver may
    take the lease in between.
    """
    if settings.validator_lease:
        from app.topics import ensure_lease_topic

        ensure_lease_topic(settings)
        ValidatorLease(lease_config(settings, checkpoint)).check()


def take(spark: Any, settings: Settings, checkpoint: str) -> Ownership:  # noqa: ANN401
    """Take the job lock and the lease on ``checkpoint``; raise ``CheckpointLeased`` or ``CheckpointInUse``."""
    root = rocks_root(settings, checkpoint)
    _reclaim(spark, job_lock_path(checkpoint, root))
    lease: ValidatorLease | None = None
    if settings.validator_lease:
        check_lease(settings, checkpoint)  # before the flock: a driver elsewhere is named as the lease holder, not as a lock file
        lease = ValidatorLease(lease_config(settings, checkpoint))
    lock = acquire_job_lock(checkpoint, root)
    owner = Ownership(checkpoint, lock, lease, spark)
    if lease is not None:
        lease.on_lost = owner.fenced
        try:
            lease.acquire()
        except BaseException:
            lock.release()
            raise
    return owner


def attach(owner: Ownership, query: Any) -> Callable[[], None]:  # noqa: ANN401
    """Tie ``owner`` to the started ``query``; return the ``on_end`` that releases it (for the query's watch)."""
    qid = str(query.id)
    with owner._guard:
        owner.query = query
    with _owners_guard:
        _owners[qid] = owner
    if owner.lost is not None:  # lost between acquire and start
        owner.fenced(owner.lost)

    def on_end() -> None:
        owner.release()
        _forget(qid)

    return on_end


def release_after(query: Any) -> None:  # noqa: ANN401
    """Stop ``query`` if it still runs, then give up what it holds, handing the lease over at once (``release``).

    For the driver's own clean exit (``run``/``drain`` return or are interrupted): the query's watch would
    release too, but a second later and perhaps after the session (and the JVM the hand-over uses) has stopped.
    """
    try:
        if query.isActive:
            query.stop()
    except Exception as e:  # noqa: BLE001 - an interrupted py4j call may leave the query to spark.stop()
        log.warning("stopping the validator query before giving up its lease: %s", e)
        return  # still running, or unknown: not safe to hand the lease over before it has stopped
    with _owners_guard:
        owner = _owners.get(str(query.id))
    if owner is not None:
        owner.release()
        _forget(str(query.id))


def _forget(qid: str) -> None:
    """Drop a released owner from the registry (after its release: ``_reclaim`` finds it until then)."""
    with _owners_guard:
        _owners.pop(qid, None)


def lost_lease(query: Any) -> str | None:  # noqa: ANN401
    """Why ``query`` was stopped for a lost lease, or None."""
    with _owners_guard:
        fenced = _fenced.get(str(query.id))
    return None if fenced is None else fenced[0]


def loss_cause(query: Any) -> LossCause | None:  # noqa: ANN401
    """What happened to the lease of ``query`` (stopped for a lost lease), asked of the coordinator; else None."""
    with _owners_guard:
        fenced = _fenced.get(str(query.id))
    if fenced is None:
        return None
    reason, lease = fenced
    return lease.loss_cause() if lease is not None else LossCause(TAKEN, None, reason)
