"""A realistic mixed workload for Arbiter, the tally of its outcomes, and how its commands go through the REST API."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

from app.load.openloop import Answer
from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    ReasonCode,
    Rejection,
    RevokeEditor,
    UpdateObject,
)

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
    last_at: float | None = None  # time.monotonic() of the latest decision
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: Event | Rejection, latency_ms: float | None) -> None:
        self.count(None if isinstance(outcome, Event) else str(outcome.reason), latency_ms)

    def count(self, reason: str | None, latency_ms: float | None) -> None:
        """Count one decision: accepted when ``reason`` is None, else rejected for ``reason``."""
        with self.lock:
            self.last_at = time.monotonic()
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


def paced(rate: float, duration: float) -> Iterator[tuple[int, float]]:
    """Yield ``(i, due)`` for the ``rate * duration`` sends of a fixed schedule, ``due`` = start + i / rate.

    Sleeps until each is due; one that is already overdue is yielded at once, so a slow caller catches up
    instead of lowering the rate, and ``due`` is what its latency should be timed from.
    """
    start = time.monotonic()
    for i in range(schedule_count(rate, duration)):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield i, due


def schedule_count(rate: float, duration: float) -> int:
    """How many sends ``duration`` seconds at ``rate`` per second make (at least one)."""
    return max(1, round(rate * duration))


def progress_line(elapsed: float, duration: float, sent: int, tally: Tally, width: int = 30) -> str:
    done = min(1.0, elapsed / duration) if duration else 1.0
    bar = "#" * int(done * width) + "-" * (width - int(done * width))
    return f"\r[{bar}] {elapsed:5.1f}s sent={sent} decided={tally.decided()} accepted={tally.accepted}"


def outcomes(tally: Tally, write: Callable[[str], None] = print) -> None:
    """Print accepted and rejected-by-reason counts, one per line."""
    write(f"  accepted                {tally.accepted}")
    for reason, n in sorted(tally.rejected.items()):
        write(f"  rejected {reason:<16} {n}")


def summary(tally: Tally, sent: int, sent_s: float, offered: float, decided_s: float | None,
            write: Callable[[str], None] = print) -> None:
    """The topic mode's summary: the send rate kept, the decision rate reached, decision latency."""
    write("")
    write(f"sent {sent} commands in {sent_s:.1f}s ({per_s(sent, sent_s):.0f}/s; offered {offered:g}/s)")
    decided = tally.decided()
    span = f" by {decided_s:.1f}s after the first send ({per_s(decided, decided_s):.0f}/s)" if decided_s else ""
    write(f"decided {decided} of them{span}; {sent - decided} undecided")
    outcomes(tally, write)
    p50, p99 = tally.percentile(0.5), tally.percentile(0.99)
    if p50 is not None and p99 is not None:
        write(f"decision latency p50 {p50:.0f} ms, p99 {p99:.0f} ms ({len(tally.latencies_ms)} samples; "
              "from each command's scheduled send to its decision on the outcome topics)")


def per_s(n: int, seconds: float | None) -> float:
    return n / seconds if seconds else 0.0


# --- through the REST API ------------------------------------------------------------------------------------

DECIDED = {200, 201, 204}
_CONTENT_TYPE = {"POST": "application/json", "PATCH": "application/merge-patch+json", "PUT": "application/json"}


def api_request(cmd: Command) -> tuple[str, str, bytes | None]:
    """The HTTP method, path and body that ask the API for ``cmd``."""
    oid = cmd.object_id
    if isinstance(cmd, CreateObject):
        return "POST", "/objects", _json({"id": oid, "document": json.loads(cmd.document)})
    if isinstance(cmd, UpdateObject):
        return "PATCH", f"/objects/{oid}", cmd.patch.encode()
    if isinstance(cmd, DeleteObject):
        return "DELETE", f"/objects/{oid}", None
    if isinstance(cmd, GrantEditor | RevokeEditor):
        return ("PUT" if isinstance(cmd, GrantEditor) else "DELETE"), f"/objects/{oid}/editors/{cmd.editor}", None
    raise TypeError(cmd)


def api_headers(token: str, method: str, command_id: str, expected_version: int | None,
                prefer_wait: float | None) -> dict[str, str]:
    """Headers of one write: bearer token, the command id as Idempotency-Key, If-Match, Prefer: wait."""
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": command_id}
    if method in _CONTENT_TYPE:
        headers["Content-Type"] = _CONTENT_TYPE[method]
    if expected_version is not None:
        headers["If-Match"] = f'"{expected_version}"'
    if prefer_wait:
        headers["Prefer"] = f"wait={prefer_wait:g}"
    return headers


def answer_from(status: int, body: bytes, key: str | None = None) -> Answer:
    """Classify an API answer: a decision (accepted, or rejected with its reason), queued (202), or an error."""
    if status in DECIDED:
        return Answer(str(status), ok=True, outcome="accepted", key=key)
    if status == 202:
        return Answer("202", ok=True, outcome="queued", key=key)
    try:
        code = str(json.loads(body).get("code") or "")
    except (ValueError, AttributeError):
        code = ""
    if status < 500 and code in ReasonCode.__members__:  # the validator's decision, relayed by Prefer: wait
        return Answer(str(status), ok=True, outcome=code, key=key)
    return Answer(f"HTTP {status} {code}".rstrip(), ok=False, key=key)


async def send_http(client: Http1Pool, method: str, path: str, headers: dict[str, str], body: bytes | None,
                    timeout: float, key: str | None = None) -> Answer:
    """Send one request; a transport failure or no answer within ``timeout`` seconds is an error ``Answer``."""
    try:
        async with asyncio.timeout(timeout):
            status, content = await client.request(method, path, headers, body)
    except TimeoutError:
        return Answer("timeout", ok=False, key=key)
    except (ConnectionRefusedError, socket.gaierror):
        return Answer("connect error", ok=False, key=key)
    except (asyncio.IncompleteReadError, ConnectionError):
        return Answer("connection closed", ok=False, key=key)
    except (OSError, ValueError) as e:
        return Answer(f"connection error {type(e).__name__}", ok=False, key=key)
    return answer_from(status, content, key)


class Http1Pool:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams, for load generation against the API.

    httpx's connection pool costs CPU per request in proportion to the requests in flight (16 ms per request
    with ~1,000 in flight, measured on this machine), so an open-loop client with many waiting requests would
    become the bottleneck; this one costs the same per request at any concurrency. Plain http only; at most
    ``max_connections`` requests at once, the rest wait for a connection (inside their measured latency).

    ``reuse=False`` is a fleet of clients that each connect for one request (``Connection: close``): every request
    pays the TCP handshake and the server's accept, as when many independent clients open connections on demand.
    """

    def __init__(self, base_url: str, max_connections: int, *, reuse: bool = True) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"only http://host:port URLs are supported, got {base_url!r}")
        self.host, self.port = url.hostname, url.port or 80
        self.netloc = url.netloc
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(max_connections)
        self.reuse = reuse

    async def request(self, method: str, path: str, headers: dict[str, str], body: bytes | None) -> tuple[int, bytes]:
        """Send one request and return (status, body)."""
        async with self._slots:
            reader, writer = await self._connection()
            if not self.reuse:
                headers = {**headers, "Connection": "close"}
            try:
                writer.write(_request_bytes(method, path, self.netloc, headers, body or b""))
                status, content, keep = await _read_response(reader, method)
            except BaseException:
                writer.close()
                raise
            if keep and self.reuse:
                self._idle.append((reader, writer))
            else:
                writer.close()
            return status, content

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self._idle:
            reader, writer = self._idle.pop()
            if not reader.at_eof() and not writer.is_closing():  # the server may have closed an idle one
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


def _request_bytes(method: str, path: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[int, bytes, bool]:
    """(status, body, keep-alive) of one response: Content-Length or chunked bodies."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    version, status = head[0].split(" ", 2)[:2]
    fields = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip().lower()
    keep = version == "HTTP/1.1" and fields.get("connection") != "close"
    if method == "HEAD" or status in ("204", "304"):
        return int(status), b"", keep
    if "chunked" in fields.get("transfer-encoding", ""):
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append(await reader.readexactly(size + 2))
        await reader.readuntil(b"\r\n")  # no trailers from the API
        return int(status), b"".join(p[:-2] for p in parts), keep
    if "content-length" in fields:
        return int(status), await reader.readexactly(int(fields["content-length"])), keep
    return int(status), await reader.read(), False


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
