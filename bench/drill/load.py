"""The drill's steady mixed load through the API, and a watch on how far each partition has been decided.

``Load`` runs a few threads, each with the Python client over both API replicas (it turns to the other replica
when one does not answer): creates, updates and deletes of its own objects, now and then an update of one it
deleted (a rejection), each with its command id as the Idempotency-Key, a share with ``Prefer: wait``; and a
share of reads of its own objects, which must never be older than the version it saw accepted (read-your-writes). Every
write's answer, latency and the 503s and transport failures behind it (the client's ``on_retry``) are kept.
``Watch`` samples the output topics' high watermarks per partition, for "time until every partition decides again".
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from app.api.callers.identity import dev_token
from app.settings import Settings
from arbiter_client import Accepted, ArbiterError, Client, Queued, RetryPolicy, TransportFailed


@dataclass(frozen=True, slots=True)
class Write:
    """One write as the client saw it: when it was sent and answered, its command id, and how it ended
    (``acked``: the API answered with a decision or a 202, so the command is on the commands topic)."""

    sent: float
    done: float
    command_id: str
    acked: bool
    outcome: str


@dataclass(frozen=True, slots=True)
class Retry:
    """A 503 (with or without ``Retry-After``), 429 or transport failure the client retried after."""

    at: float
    kind: str  # "503", "503 without Retry-After", "429", "transport"; "read ..." for a read's


@dataclass
class Load:
    """``threads`` clients at ``rate`` writes/s together over ``urls`` until ``stop``; ``wait_share`` of them
    with ``Prefer: wait``."""

    settings: Settings
    urls: list[str]
    rate: float
    threads: int = 4
    wait_share: float = 0.3
    read_share: float = 0.1
    writes: list[Write] = field(default_factory=list)
    retries: list[Retry] = field(default_factory=list)
    reads: int = 0
    #: Reads of an object this client wrote and saw accepted at version v that answered a version below v:
    #: read-your-writes broken (the client sends its positions; either replica must honour them).
    stale_reads: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _reading: threading.local = field(default_factory=threading.local)  # this thread's retries are a read's

    def start(self) -> None:
        for n in range(self.threads):
            t = threading.Thread(target=self._run, args=(n,), name=f"drill-load-{n}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)

    def _on_retry(self, error: ArbiterError, _wait: float) -> None:
        if isinstance(error, TransportFailed):
            kind = "transport"
        elif error.status == 503:
            kind = "503" if error.retry_after is not None else "503 without Retry-After"
        else:
            kind = str(error.status)
        self.retries.append(Retry(time.monotonic(), f"read {kind}" if getattr(self._reading, "on", False) else kind))

    def _run(self, n: int) -> None:
        rng = random.Random(n)  # noqa: S311 - a workload, not a secret
        token = dev_token(self.settings, f"drill-{n}")
        live: list[str] = []
        deleted: list[str] = []
        period = self.threads / self.rate
        # Retries enough to outlast a broker restart or a replica's death; Retry-After honoured as the API says.
        policy = RetryPolicy(attempts=30, max_backoff_s=2.0)
        with Client(self.urls, token, retry=policy, wait_s=0, on_retry=self._on_retry, timeout=30) as client:
            i, next_at = 0, time.monotonic()
            while not self._stop.is_set():
                if rng.random() < self.read_share:
                    self._read(client, rng, live)
                i += 1
                cid = f"d{n}-{i}"
                wait = 5.0 if rng.random() < self.wait_share else 0.0
                r = rng.random()
                sent = time.monotonic()
                try:
                    if not live or r < 0.3:
                        oid = cid
                        res = client.create({"n": i, "by": n}, oid, key=cid, wait=wait, follow=False)
                        live.append(oid)
                    elif r < 0.9 or not live:
                        res = client.update(rng.choice(live), {"n": i}, key=cid, wait=wait, follow=False)
                    elif r < 0.95 or not deleted:
                        oid = live.pop(rng.randrange(len(live)))
                        res = client.delete(oid, key=cid, wait=wait, follow=False)
                        deleted.append(oid)
                    else:
                        res = client.update(rng.choice(deleted), {"n": i}, key=cid, wait=wait, follow=False)
                    outcome, acked = ("accepted" if isinstance(res, Accepted) else "queued"), True
                    assert isinstance(res, Accepted | Queued)
                except ArbiterError as e:
                    # a decision relayed by Prefer: wait (a rejection) is on the topics; an error after the
                    # retries ran out (or a refusal before the topic) is not acknowledged
                    acked = e.status is not None and e.status < 500 and e.code not in (None, "RATE_LIMITED")
                    outcome = e.code or f"HTTP {e.status}"
                self.writes.append(Write(sent, time.monotonic(), cid, acked, outcome))
                next_at += period
                time.sleep(max(0.0, next_at - time.monotonic()))

    def _read(self, client: Client, rng: random.Random, live: list[str]) -> None:
        """Read one of this client's live objects it saw accepted; keep it if the answer is older than that."""
        known = client.protocol.versions
        mine = [o for o in live[-50:] if o in known]
        if not mine:
            return
        oid = rng.choice(mine)
        want = known[oid]
        self._reading.on = True
        try:
            doc = client.get(oid)
        except ArbiterError:
            return  # deleted meanwhile, or the read model could not get there in time (503 after the retries)
        finally:
            self._reading.on = False
        self.reads += 1
        if doc.version < want:
            self.stale_reads.append(f"{oid}: read version {doc.version}, accepted at {want}")


@dataclass
class Watch:
    """Samples, every ``every`` s, the events + rejections high watermark of each partition (sum of both)."""

    settings: Settings
    every: float = 0.5
    samples: list[tuple[float, dict[int, int]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="drill-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        s = self.settings
        # Leaders move when a broker dies: refresh metadata often, and start afresh after a failed sample (a
        # client that keeps asking the dead leader waits for its 5-minute metadata refresh).
        conf = {"bootstrap.servers": s.kafka_bootstrap, "group.id": "drill-watch", "log_level": 0,
                "topic.metadata.refresh.interval.ms": 1000}
        c = Consumer(conf)
        try:
            while not self._stop.is_set():
                try:
                    hw = {p: sum(c.get_watermark_offsets(TopicPartition(t, p), timeout=2, cached=False)[1]
                                 for t in (s.topic_events, s.topic_rejections)) for p in range(s.partitions)}
                    self.samples.append((time.monotonic(), hw))
                except Exception:  # noqa: BLE001 - a broker down or paused: that sample is missing
                    c.close()
                    c = Consumer(conf)
                self._stop.wait(self.every)
        finally:
            c.close()

    def decides_again(self, since: float) -> float | None:
        """Seconds from ``since`` until every partition's outputs grew past what they were at ``since``."""
        before = next((hw for t, hw in reversed(self.samples) if t <= since), None)
        if before is None:
            return None
        waiting = set(before)
        for t, hw in self.samples:
            if t <= since:
                continue
            waiting -= {p for p in waiting if hw.get(p, 0) > before[p]}
            if not waiting:
                return t - since
        return None
