"""Wait on a running Spark query from the driver in short py4j calls, with SIGINT and SIGTERM asking it to stop."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """While the driver waits on its query, SIGINT and SIGTERM set the yielded event instead of raising.

    A ``KeyboardInterrupt`` raised inside a py4j call (``awaitTermination`` blocks in one) leaves that thread's
    py4j connection with an unread answer: the next call, the ``query.stop()`` before the lease is handed
    over, then fails with "Answer from Java side is empty". A handler that only sets a flag lets the call
    finish (PEP 475 resumes the read). A second signal raises as before, for a driver that will not stop.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(_signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def await_query(query: Any, timeout: float | None, stop: threading.Event,  # noqa: ANN401
                until: threading.Event | None = None) -> bool:
    """Wait until ``query`` ends (True), ``timeout`` seconds pass or ``stop`` (or ``until``) is set (False), in short
    py4j calls."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set() and not (until is not None and until.is_set()):
        left = AWAIT_STEP_S if deadline is None else min(AWAIT_STEP_S, deadline - time.monotonic())
        if left <= 0:
            return False
        if query.awaitTermination(left):
            return True
    return False


AWAIT_STEP_S = 0.5
