"""A benchmark's throwaway broker: started on free ports under a work directory, stopped by its PID at the end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.local.kafka_broker import LocalBroker, free_port
from app.settings import Settings


@contextmanager
def throwaway_broker(work: Path, heap: str = "1g") -> Iterator[LocalBroker]:
    """Start a KRaft broker in ``work/kafka`` on free loopback ports; stop it when the block ends, however it ends."""
    broker = LocalBroker(work / "kafka", port=free_port(), controller_port=free_port(), heap=heap)
    broker.start(Settings())
    try:
        yield broker
    finally:
        broker.stop()


@contextmanager
def bootstrap_for(given: str | None, work: Path, heap: str = "1g") -> Iterator[str]:
    """Yield ``given`` (an existing broker's bootstrap) if set, else a throwaway broker's, stopped at the end."""
    if given is not None:
        yield given
        return
    with throwaway_broker(work, heap) as broker:
        yield broker.bootstrap
