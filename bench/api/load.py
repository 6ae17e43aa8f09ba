"""A lean HTTP/1.1 keep-alive load client on asyncio (httpx costs more CPU per request than the server under test).

Each of ``connections`` workers sends one request at a time on its own connection, so latency is the
request's full round trip. Bounded by ``count`` requests in total and by ``seconds``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    sent: int = 0
    elapsed: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.sent / self.elapsed if self.elapsed else 0.0

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def request_bytes(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: bench", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    body = await reader.readexactly(length) if length else b""
    return status, body


async def run_load(host: str, port: int, make_request: Callable[[int], bytes], *, count: int, connections: int,
                   seconds: float, on_body: Callable[[int, bytes], None] | None = None) -> LoadResult:
    """Send ``count`` requests (``make_request(i)`` builds request i) over ``connections`` connections."""
    result = LoadResult()
    next_i = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal next_i
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while next_i < count and time.perf_counter() < deadline:
                i = next_i
                next_i += 1
                req = make_request(i)
                t0 = time.perf_counter()
                writer.write(req)
                status, body = await _read_response(reader)
                result.latencies.append(time.perf_counter() - t0)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                result.sent += 1
                if on_body is not None:
                    on_body(status, body)
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    result.elapsed = time.perf_counter() - start
    return result
