"""A realistic mixed workload for Arbiter: creates, updates with and without If-Match, deletes, retries, mistakes."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from commands import Command, CreateObject, DeleteObject, Event, GrantEditor, Rejection, UpdateObject

USERS = ("alice", "bob", "carol", "dave")
OUTSIDER = "mallory"  # never granted anything: her edits are FORBIDDEN


@dataclass
class Known:
    """What the load generator believes about one object (it may be stale: that is part of the test)."""

    owner: str
    version: int = 1
    editors: set[str] = field(default_factory=set)
    deleted: bool = False


class Workload:
    """Yields (command, garbage) pairs: a command to send, or raw garbage bytes for the topic (``command`` None)."""

    def __init__(self, objects: int, seed: int = 1, garbage_ratio: float = 0.0) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - a workload, not a secret
        self.objects = objects
        self.garbage_ratio = garbage_ratio
        self.known: dict[str, Known] = {}
        self.sent: list[Command] = []
        self.run = uuid.uuid4().hex[:6]

    def _now(self) -> datetime:
        return datetime.now(UTC)

    def next(self) -> tuple[Command | None, bytes | None]:
        rng = self.rng
        if self.garbage_ratio and rng.random() < self.garbage_ratio:
            return None, rng.randbytes(rng.randint(1, 40))
        oid = f"obj-{self.run}-{rng.randrange(self.objects)}"
        k = self.known.get(oid)
        cid = str(uuid.uuid4())
        roll = rng.random()
        if self.sent and roll < 0.04:  # a client retry: same command id, same payload
            return self.sent[rng.randrange(max(0, len(self.sent) - 50), len(self.sent))], None
        cmd: Command
        if k is None or roll < 0.08:
            owner = rng.choice(USERS) if k is None else k.owner
            doc = json.dumps({"title": f"doc {oid}", "n": rng.randrange(1000)}, separators=(",", ":"))
            cmd = CreateObject(cid, oid, owner, self._now(), document=doc)
            if k is None:
                self.known[oid] = Known(owner)
        elif roll < 0.14:
            cmd = GrantEditor(cid, oid, k.owner, self._now(), editor=rng.choice(USERS))
            k.editors.add(cmd.editor)
        elif roll < 0.17:
            cmd = DeleteObject(cid, oid, k.owner, self._now())
            k.deleted = True
        elif roll < 0.22:
            cmd = UpdateObject(cid, oid, OUTSIDER, self._now(), patch='{"vandal":true}')
        else:
            who = rng.choice([k.owner, *k.editors])
            expected = k.version if rng.random() < 0.5 else None
            cmd = UpdateObject(cid, oid, who, self._now(), expected, patch=json.dumps({"n": rng.randrange(1000)}))
            k.version += 1
        self.sent.append(cmd)
        return cmd, None


@dataclass
class Tally:
    """Outcomes seen and decision latencies, fed from a consumer thread."""

    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: Event | Rejection, latency_ms: float | None) -> None:
        self.count(None if isinstance(outcome, Event) else str(outcome.reason), latency_ms)

    def count(self, reason: str | None, latency_ms: float | None) -> None:
        """Count one decision: accepted when ``reason`` is None, else rejected for ``reason``."""
        with self.lock:
            if reason is None:
                self.accepted += 1
            else:
                self.rejected[reason] += 1
            if latency_ms is not None:
                self.latencies_ms.append(latency_ms)

    def decided(self) -> int:
        return self.accepted + sum(self.rejected.values())

    def percentile(self, q: float) -> float | None:
        with self.lock:
            xs = sorted(self.latencies_ms)
        if not xs:
            return None
        return xs[min(len(xs) - 1, int(q * len(xs)))]


def paced(rate: float, duration: float) -> Iterator[int]:
    """Yield sequence numbers at ``rate`` per second for ``duration`` seconds (catching up if behind)."""
    start = time.monotonic()
    i = 0
    while True:
        now = time.monotonic()
        if now - start >= duration:
            return
        due = start + i / rate
        if due > now:
            time.sleep(min(due - now, 0.05))
            continue
        yield i
        i += 1


def progress_line(elapsed: float, duration: float, sent: int, tally: Tally, width: int = 30) -> str:
    done = min(1.0, elapsed / duration) if duration else 1.0
    bar = "#" * int(done * width) + "-" * (width - int(done * width))
    return f"\r[{bar}] {elapsed:5.1f}s sent={sent} decided={tally.decided()} accepted={tally.accepted}"


def summary(tally: Tally, sent: int, elapsed: float, write: Callable[[str], None] = print) -> None:
    write("")
    write(f"sent {sent} commands in {elapsed:.1f}s ({sent / elapsed if elapsed else 0:.0f}/s); decided {tally.decided()}")
    write(f"  accepted                {tally.accepted}")
    for reason, n in sorted(tally.rejected.items()):
        write(f"  rejected {reason:<16} {n}")
    p50, p99 = tally.percentile(0.5), tally.percentile(0.99)
    if p50 is not None and p99 is not None:
        write(f"decision latency p50 {p50:.0f} ms, p99 {p99:.0f} ms ({len(tally.latencies_ms)} samples)")
