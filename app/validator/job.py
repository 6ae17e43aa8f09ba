"""Run the validator's driver: take the checkpoint, start the chosen backend's query, wait, stop and hand over.

``build_query`` starts ``backend_for(settings)`` (``app.validator.backends``): "spark" is the reference backend
(``app.validator.spark``, ``transformWithState``), "rocksdb" the shard servers (``app.validator.rocks``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from app.errors import ArbiterError, BrokerUnavailable
from app.settings import Settings, checkpoint_uri
from app.validator.backends import backend_for
from app.validator.codegen import codegen_conf
from app.validator.lease import FENCED, TAKEN, CheckpointLeased, LeaseLost, LossCause
from app.validator.owner import attach, loss_cause, lost_lease, release_after, take
from app.validator.progress import QueryWatch, add_state, progress_path, write_progress
from app.validator.waiting import await_query, stop_on_signal

log = logging.getLogger("arbiter.validator")


class DrainTimeout(ArbiterError):
    """``drain`` did not process every available command in time."""

    code = "DRAIN_TIMEOUT"


def build_query(spark, settings: Settings, *, available_now: bool = False):  # noqa: ANN001, ANN201
    """Take the checkpoint (job lock, lease), start the query for ``settings.state_backend`` and return it.

    Raises ``CheckpointLeased`` (a driver anywhere holds the lease) or ``CheckpointInUse`` (one on this host
    holds the lock) before touching any state; the query's watch releases both when it ends.
    """
    uri = checkpoint_uri(settings)
    owner = take(spark, settings, uri)
    for key, value in codegen_conf(settings).items():
        spark.conf.set(key, value)  # read by every task at run time (validator_codegen)
    try:
        query = backend_for(settings).start(spark, settings, uri, available_now=available_now)
    except BaseException:
        owner.release()
        raise
    QueryWatch(query, progress_path(settings), on_end=attach(owner, query))
    return query


def raise_if_fenced(query: Any, cause: LossCause | None = None) -> None:  # noqa: ANN401
    """Raise ``LeaseLost`` naming what happened if ``query`` was stopped for a lost lease."""
    reason = lost_lease(query)
    if reason is None:
        return
    cause = cause or loss_cause(query)
    name = query_name_of(query)
    if cause is not None and cause.kind == FENCED:
        raise LeaseLost(f"validator {name} stopped: a driver with this one's instance id (same host, local state "
                        f"directory and checkpoint) replaced it in the lease group ({reason}). Two drivers are "
                        "configured alike: stop one of them")
    if cause is not None and cause.holder is not None and cause.kind == TAKEN:
        raise LeaseLost(f"validator {name} stopped: it lost the checkpoint's lease to another member ({reason}); "
                        f"{cause.holder} holds it now and owns the checkpoint. Check which one runs before "
                        "restarting this one")
    raise LeaseLost(f"validator {name} stopped: it lost the checkpoint's lease ({reason}); "
                    f"{cause.detail if cause is not None else 'the coordinator was not asked'}")


def query_name_of(query: Any) -> str:  # noqa: ANN401
    try:
        return str(query.name)
    except Exception:  # noqa: BLE001 - the session may be stopped
        return "query"




def drain(spark, settings: Settings, timeout: float = 300) -> None:  # noqa: ANN001
    """Process every command available now (trigger availableNow), then stop; raise DrainTimeout if it takes longer."""
    query = _supervise(spark, settings, available_now=True, timeout=timeout)
    # The watch polls once a second; publish the final progress before returning so the status file is current.
    last = query.lastProgress
    if last is not None:
        write_progress(progress_path(settings), add_state(progress_path(settings), json.loads(last.json)))


def run(spark, settings: Settings, until: threading.Event | None = None) -> bool:  # noqa: ANN001
    """Run the validator until it is stopped or fails; raise ``LeaseLost`` if another driver took its lease.

    Cut off from Kafka for longer than the lease session, the driver loses its lease without any other driver
    owning the checkpoint: the query stays stopped, and it starts again in this process once the broker answers
    and this driver holds the lease again (``_supervise``). Once ``until`` is set (a rescale's switch:
    ``app.rescale.handover``) the query is stopped, its lease handed over, and True returned: the caller starts
    the next generation's query in the same Spark session.
    """
    _supervise(spark, settings, available_now=False, timeout=None, until=until)
    return until is not None and until.is_set()


def _supervise(spark, settings: Settings, *, available_now: bool, timeout: float | None,  # noqa: ANN001, ANN202
               until: threading.Event | None = None):
    """Start the query and wait for it; after a lost lease no other member holds, take it back and start again."""
    deadline = None if timeout is None else time.monotonic() + timeout
    query = build_query(spark, settings, available_now=available_now)
    with stop_on_signal() as stop:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ended = await_query(query, left, stop, until)
            finally:
                release_after(query)  # a clean stop (Ctrl-C, SIGTERM to this process) hands the lease over at once
            if stop.is_set():
                raise KeyboardInterrupt
            if until is not None and until.is_set():
                _wait_inactive(spark, query, stop)  # a new generation's query must not meet this one in the session
                return query
            if not ended:
                raise DrainTimeout(f"validator did not drain {settings.topic_commands} within {timeout:.0f} s")
            cause = loss_cause(query)
            if cause is None or not cause.may_rejoin:
                raise_if_fenced(query, cause)
                return query
            log.error("validator %s lost its lease without another member taking it (%s: %s); the query stays "
                      "stopped until this driver holds the lease again", query_name_of(query), cause.kind,
                      cause.detail)
            _wait_inactive(spark, query, stop)
            query = _rejoin(spark, settings, available_now, cause, stop)
            if query is None:
                raise KeyboardInterrupt


REJOIN_PAUSE_S = 1.0
INACTIVE_TIMEOUT_S = 120.0


def _wait_inactive(spark: Any, query: Any, stop: threading.Event) -> None:  # noqa: ANN401
    """Stop ``query`` and wait until the session no longer lists it as active (at most ``INACTIVE_TIMEOUT_S``).

    The lease's loss stops the query from another thread, and ``awaitTermination`` can return while the session
    still lists it: a new query of the same name then fails to start ("a query with that name is already
    active"), seen when the broker came back within seconds of the loss.
    """
    name = query_name_of(query)
    try:
        query.stop()
    except Exception as e:  # noqa: BLE001 - stopped already, or the session refuses: the wait below decides
        log.debug("stopping %s before taking the lease back: %s", name, e)
    deadline = time.monotonic() + INACTIVE_TIMEOUT_S
    while not stop.is_set() and time.monotonic() < deadline:
        if all(q.name != name for q in spark.streams.active):
            return
        stop.wait(0.1)


def _rejoin(spark, settings: Settings, available_now: bool, cause: LossCause,  # noqa: ANN001, ANN202
            stop: threading.Event):
    """Take the lease back and start the query again once the broker answers; None if stopped meanwhile."""
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            query = build_query(spark, settings, available_now=available_now)
        except BrokerUnavailable as e:
            log.warning("validator cut off from Kafka: %s; trying again", e)
            stop.wait(REJOIN_PAUSE_S)
            continue
        except CheckpointLeased as e:
            raise LeaseLost(f"this validator lost the checkpoint's lease ({cause.kind}: {cause.detail}), and while it "
                            f"waited to take it back another driver took it: {e}") from e
        log.info("validator took its lease back after %.1f s and started again", time.monotonic() - t0)
        return query
    return None
