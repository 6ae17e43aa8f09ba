"""One load client process: its own principal creates fresh objects and updates the ones it created, open-loop.

Clients run as separate processes (``multiprocessing`` spawn) so the benchmark's own bookkeeping never shares an
event loop or a GIL with the sends, and ``--clients N`` spreads a rate too high for one process: client k takes
requests k, k+N, k+2N, ... of one schedule. Each reports its samples and its own CPU seconds over the run.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection

from app.load.openloop import Answer, Sample, drive
from app.load.workload import Http1Pool, api_headers, send_http

#: What travels back over the pipe per request: index, scheduled, sent, done, kind, ok, outcome, key.
Row = tuple[int, float, float, float, str, bool, str | None, str | None]


@dataclass(frozen=True)
class ClientSpec:
    """Everything a client process needs; picklable."""

    api_url: str
    token: str
    principal: str
    tag: str
    rate: float
    count: int
    client: int
    clients: int
    prefer_wait: float | None
    timeout: float
    connections: int
    update_share: float
    seed: int
    fresh_connections: bool = False


@dataclass(frozen=True)
class ClientResult:
    rows: list[Row]
    cpu_s: float
    wall_s: float


class OwnObjects:
    """The workload: a create of a fresh object, or an update of one this client created and the API acknowledged."""

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed * 1000 + spec.client)  # noqa: S311 - a workload, not a secret
        self.acked: list[str] = []

    def request(self, i: int) -> tuple[str, str, bytes, str, str | None]:
        """(method, path, body, command id, id of the object created) for request ``i``."""
        cid = f"{self.spec.tag}-{i}"
        if self.acked and self.rng.random() < self.spec.update_share:
            oid = self.acked[self.rng.randrange(len(self.acked))]
            return "PATCH", f"/objects/{oid}", b'{"n":%d}' % i, cid, None
        oid = f"{self.spec.tag}-{i}"
        return "POST", "/objects", b'{"id":"%s","document":{"title":"bench","n":%d}}' % (oid.encode(), i), cid, oid

    def answered(self, created: str | None, answer: Answer) -> None:
        """Remember a created object once it is on the commands topic (202) or decided accepted (201)."""
        if created is not None and answer.outcome in ("queued", "accepted"):
            self.acked.append(created)


def client_main(spec: ClientSpec, conn: Connection) -> None:
    """Process entry: open the HTTP client, say ready, receive t0, run the schedule, send back a ClientResult."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops clients by PID
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # one descriptor per connection
    try:
        import uvloop  # the API's own event loop; a cheaper one for the client too
    except ImportError:
        asyncio.run(_main(spec, conn))
    else:
        uvloop.run(_main(spec, conn))


async def _main(spec: ClientSpec, conn: Connection) -> None:
    work = OwnObjects(spec)
    client = Http1Pool(spec.api_url, spec.connections, reuse=not spec.fresh_connections)
    await client.request("GET", "/healthz", {}, None)  # the API answers before the clock starts

    async def send(i: int) -> Answer:
        method, path, body, cid, created = work.request(i)
        headers = api_headers(spec.token, method, cid, None, spec.prefer_wait)
        answer = await send_http(client, method, path, headers, body, spec.timeout, key=cid)
        work.answered(created, answer)
        return answer

    conn.send("ready")
    t0 = conn.recv()
    cpu0 = sum(os.times()[:2])
    samples = await drive(send, spec.rate, range(spec.client, spec.count, spec.clients), t0=t0)
    cpu1 = sum(os.times()[:2])
    await client.close()
    conn.send(ClientResult([_row(s) for s in samples], cpu1 - cpu0, max((s.done for s in samples), default=t0) - t0))


def _row(s: Sample) -> Row:
    a = s.answer
    return s.index, s.scheduled, s.sent, s.done, a.kind, a.ok, a.outcome, a.key


def samples_of(rows: list[Row]) -> list[Sample]:
    """Rebuild samples from the rows a client sent back."""
    return [Sample(i, sch, sent, done, Answer(kind, ok, outcome, key)) for i, sch, sent, done, kind, ok, outcome, key in rows]
