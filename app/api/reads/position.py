"""Read-your-writes: positions on the events topic, and waiting until the read model has projected past them.

A position names one event record: ``events:<partition>:<offset>`` (``events`` stands for the events topic,
whatever ``ARBITER_TOPIC_EVENTS`` calls it). A write answered with its decision carries its event's position in
``Arbiter-Position``; ``GET /objects/{id}`` may send positions back in ``Arbiter-Min-Position`` (comma-separated,
or the header repeated) and is answered once the read model's stored next offset of each named partition is past
the named offset. The DB projection stores those offsets in the same atomic batch as the documents (both
backends), so an offset seen stored means its document is readable.

The wait never depends on the object read: it is decided before the object is looked up, so it says nothing about
whether an object exists or may be read.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from app.api.problems import ApiError

log = logging.getLogger(__name__)

HEADER = "Arbiter-Position"
MIN_HEADER = "Arbiter-Min-Position"
_POSITION = re.compile(r"^events:([0-9]{1,9}):([0-9]{1,18})$")
#: Positions one request may name: a request names one per partition it wrote to, at most.
MAX_POSITIONS = 64
#: How often a waiting request's process reads the read model's offsets again (one read serves every waiter).
POLL_S = 0.02


def format_position(partition: int, offset: int) -> str:
    """Return the ``Arbiter-Position`` value of the event at ``offset`` of ``partition`` of the events topic."""
    return f"events:{partition}:{offset}"


def parse_min_positions(values: list[str]) -> dict[int, int]:
    """Return the highest offset named per partition by ``Arbiter-Min-Position`` values; raise 400 BAD_REQUEST."""
    wanted: dict[int, int] = {}
    items = [item.strip() for value in values for item in value.split(",")]
    if len(items) > MAX_POSITIONS:
        raise ApiError(f"{MIN_HEADER} names {len(items)} positions, at most {MAX_POSITIONS} are taken",
                       code="BAD_REQUEST")
    for item in items:
        m = _POSITION.match(item)
        if m is None:
            raise ApiError(f"{MIN_HEADER} must be positions events:<partition>:<offset> (as {HEADER} gave them), "
                           f"got {item[:80]!r}", code="BAD_REQUEST")
        partition, offset = int(m.group(1)), int(m.group(2))
        wanted[partition] = max(offset, wanted.get(partition, -1))
    return wanted


def _passed(stored: dict[int, int], wanted: dict[int, int]) -> bool:
    return all(stored.get(p, 0) > o for p, o in wanted.items())


class PositionWatch:
    """Waits of one process for the read model's offsets: one poll loop, running while anyone waits, wakes them all.

    ``read_offsets`` returns the read model's next offset per partition of the events topic; ``blocking`` says it
    is a network round trip (PostgreSQL), read on the threadpool, never on the event loop.
    """

    def __init__(self, read_offsets: Callable[[], dict[int, int]], *, blocking: bool, poll_s: float = POLL_S) -> None:
        self._read = read_offsets
        self._blocking = blocking
        self._poll_s = poll_s
        self._known: dict[int, int] = {}
        self._waiters: list[tuple[dict[int, int], asyncio.Future[None]]] = []
        self._poller: asyncio.Task[None] | None = None

    async def _offsets(self) -> dict[int, int]:
        offsets = await run_in_threadpool(self._read) if self._blocking else self._read()
        self._known = offsets
        return offsets

    async def reached(self, wanted: dict[int, int], timeout: float) -> bool:
        """Return True once the read model has passed every position in ``wanted``, False after ``timeout`` s."""
        if _passed(self._known, wanted) or _passed(await self._offsets(), wanted):
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (wanted, fut)
        self._waiters.append(entry)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="arbiter-position-poll")
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    async def _poll(self) -> None:
        while self._waiters:
            await asyncio.sleep(self._poll_s)
            started = time.monotonic()
            try:
                offsets = await self._offsets()
            except Exception:  # noqa: BLE001 - a read model down: the waiters time out into their 503
                log.warning("position: reading the read model's offsets failed", exc_info=True)
                continue
            for wanted, fut in list(self._waiters):
                if not fut.done() and _passed(offsets, wanted):
                    fut.set_result(None)
            log.debug("position: polled in %.1f ms", (time.monotonic() - started) * 1000)
