"""The open-loop driver on a fake clock: sends keep their schedule however slow the answers, latency counts from it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import math
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from app.load.openloop import Answer, Sample, drive, percentile, summarize
from app.load.workload import Http1Pool, _read_response, answer_from, send_http

pytestmark = pytest.mark.unit
T = TypeVar("T")


class FakeClock:
    """Virtual time: ``sleep`` parks a coroutine; ``run`` advances to the next wake-up once nothing else can run."""

    def __init__(self, start: float = 100.0) -> None:
        self.t = start
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self.t + max(0.0, seconds), next(self._seq), fut))
        await fut

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        async def main() -> T:
            task = asyncio.ensure_future(coro)
            while True:
                for _ in range(50):  # let every runnable task reach its next fake sleep
                    await asyncio.sleep(0)
                if task.done():
                    return task.result()
                assert self._timers, "deadlock: nothing runnable and no timer"
                when, _, fut = heapq.heappop(self._timers)
                self.t = max(self.t, when)
                fut.set_result(None)

        return asyncio.run(main())


def slow_sender(clock: FakeClock, delay: float, log: list[tuple[int, float]]) -> Any:
    async def send(i: int) -> Answer:
        log.append((i, clock.now()))
        await clock.sleep(delay)
        return Answer("200", ok=True, outcome="accepted", key=f"c{i}")

    return send


def test_each_request_leaves_at_its_scheduled_time_though_answers_take_ten_intervals() -> None:
    clock, started = FakeClock(), []
    samples = clock.run(drive(slow_sender(clock, 1.0, started), rate=10, indexes=range(20), clock=clock))
    t0 = 100.0
    assert [i for i, _ in started] == list(range(20))
    for i, at in started:
        assert at == pytest.approx(t0 + i / 10, abs=1e-9)
    for s in samples:
        assert s.scheduled == pytest.approx(t0 + s.index / 10, abs=1e-9)
        assert s.send_lag == pytest.approx(0.0, abs=1e-9)
        assert s.latency == pytest.approx(1.0, abs=1e-9)
    assert summarize(samples, 10, t0).peak_in_flight == 10  # a closed loop of one would have had 1


def test_latency_includes_queueing_behind_a_slow_server() -> None:
    """One server, 0.3 s per request, offered 10/s: request i is answered at 0.3 (i + 1), due at 0.1 i."""
    clock = FakeClock(start=0.0)
    server = asyncio.Lock()

    async def send(i: int) -> Answer:
        async with server:
            await clock.sleep(0.3)
        return Answer("202", ok=True, outcome="queued")

    samples = clock.run(drive(send, rate=10, indexes=range(10), clock=clock))
    for s in samples:
        assert s.send_lag == pytest.approx(0.0, abs=1e-9)
        assert s.done == pytest.approx(0.3 * (s.index + 1), abs=1e-9)
        assert s.latency == pytest.approx(0.3 + 0.2 * s.index, abs=1e-9)  # the queue grows 0.2 s per request
    summary = summarize(samples, 10, 0.0)
    assert summary.sent_per_s == pytest.approx(10.0)
    assert summary.completed_per_s == pytest.approx(10 / 3.1)  # what the server managed, not what was offered
    assert summary.latency["max"] == pytest.approx(2.1)


def test_a_late_client_still_times_from_the_schedule() -> None:
    """Started 1 s after t0: the first ten requests are overdue, leave at once and carry the lag in their latency."""
    clock, started = FakeClock(start=51.0), []
    samples = clock.run(drive(slow_sender(clock, 0.05, started), rate=10, indexes=range(15), t0=50.0, clock=clock))
    for s in samples[:10]:
        assert s.sent == pytest.approx(51.0, abs=1e-9)
        assert s.send_lag == pytest.approx(1.0 - s.index / 10, abs=1e-9)
        assert s.latency == pytest.approx(s.send_lag + 0.05, abs=1e-9)
    for s in samples[11:]:
        assert s.send_lag == pytest.approx(0.0, abs=1e-9)


def test_interleaved_indexes_share_one_schedule() -> None:
    """Two client processes each take every other index of one schedule (same t0, same rate)."""
    clock, started = FakeClock(start=0.0), []
    samples = clock.run(drive(slow_sender(clock, 0.5, started), rate=4, indexes=range(1, 12, 2), t0=0.0, clock=clock))
    assert [s.index for s in samples] == [1, 3, 5, 7, 9, 11]
    assert [at for _, at in started] == pytest.approx([0.25, 0.75, 1.25, 1.75, 2.25, 2.75])


def test_a_sender_that_raises_is_an_error_answer_not_the_end_of_the_run() -> None:
    clock = FakeClock(start=0.0)

    async def send(i: int) -> Answer:
        await clock.sleep(0.01)
        if i % 3 == 0:
            raise ConnectionResetError("boom")
        return Answer("201", ok=True, outcome="accepted")

    samples = clock.run(drive(send, rate=100, indexes=range(9), clock=clock))
    summary = summarize(samples, 100, 0.0)
    assert summary.requests == 9 and summary.ok == 6
    assert summary.errors == {"exception ConnectionResetError": 3}
    assert summary.outcomes == {"accepted": 6}


def sample(i: int, scheduled: float, done: float, ok: bool = True) -> Sample:
    return Sample(i, scheduled, scheduled, done, Answer("200" if ok else "timeout", ok=ok))


def test_achieved_rate_counts_completions_not_sends() -> None:
    """Ten sent on time at 10/s; the server answers one every 0.25 s from t = 1 s; two answers are errors."""
    samples = [sample(i, i / 10, 1.0 + 0.25 * i, ok=i not in (3, 7)) for i in range(10)]
    summary = summarize(samples, 10, 0.0)
    assert summary.sent_per_s == pytest.approx(10.0)
    assert summary.completed_per_s == pytest.approx(8 / 3.35)  # 8 answered without error by t = 3.25 s (+ 0.1)
    assert summary.ok == 8 and summary.errors == {"timeout": 2}
    assert summary.span_s == pytest.approx(3.25)


def test_errors_after_the_last_completion_do_not_stretch_the_completed_rate() -> None:
    samples = [sample(i, i / 10, i / 10 + 0.1) for i in range(10)] + [sample(10, 1.0, 31.0, ok=False)]
    assert summarize(samples, 10, 0.0).completed_per_s == pytest.approx(10 / 1.1)


def test_instant_answers_complete_at_exactly_the_offered_rate() -> None:
    samples = [sample(i, i / 20, i / 20) for i in range(40)]
    summary = summarize(samples, 20, 0.0)
    assert summary.sent_per_s == pytest.approx(20.0) and summary.completed_per_s == pytest.approx(20.0)


def test_nothing_completed_is_zero_per_second() -> None:
    assert summarize([sample(0, 0.0, 5.0, ok=False)], 1, 0.0).completed_per_s == 0.0
    assert summarize([], 1, 0.0).sent_per_s == 0.0


def test_percentiles_are_nearest_rank() -> None:
    xs = [float(v) for v in range(1, 101)]
    random.Random(7).shuffle(xs)
    assert [percentile(xs, q) for q in (0.5, 0.9, 0.99, 1.0)] == [50.0, 90.0, 99.0, 100.0]
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([1.0, 2.0], 0.5) == 1.0 and percentile([1.0, 2.0], 0.51) == 2.0
    assert math.isnan(percentile([], 0.5))


def test_latency_quantiles_are_over_scheduled_times() -> None:
    samples = [Sample(i, i * 0.01, i * 0.01 + 0.0005, i * 0.01 + 0.001 * (i + 1), Answer("200", ok=True))
               for i in range(100)]
    summary = summarize(samples, 100, 0.0)
    assert summary.latency["p50"] == pytest.approx(0.050)
    assert summary.latency["p99"] == pytest.approx(0.099)
    assert summary.latency["max"] == pytest.approx(0.100)
    assert summary.send_lag["max"] == pytest.approx(0.0005)


def test_rate_must_be_positive() -> None:
    async def send(i: int) -> Answer:
        return Answer("200", ok=True)

    with pytest.raises(ValueError, match="rate"):
        asyncio.run(drive(send, rate=0, indexes=range(1)))


# --- the HTTP/1.1 transport and answer classification the open-loop API clients use (app/load/workload.py) -----------------

def test_answers_are_classified_as_decisions_queued_or_errors() -> None:
    assert answer_from(201, b"{}", "k") == Answer("201", ok=True, outcome="accepted", key="k")
    assert answer_from(204, b"").outcome == "accepted"
    assert answer_from(202, b"{}") == Answer("202", ok=True, outcome="queued")
    conflict = answer_from(412, json.dumps({"code": "VERSION_CONFLICT"}).encode())
    assert conflict == Answer("412", ok=True, outcome="VERSION_CONFLICT")  # a decision, relayed by Prefer: wait
    assert answer_from(503, json.dumps({"code": "BROKER_UNAVAILABLE"}).encode()) == \
        Answer("HTTP 503 BROKER_UNAVAILABLE", ok=False)
    assert answer_from(422, json.dumps({"code": "INVALID_REQUEST"}).encode()).ok is False
    assert answer_from(500, b"<html>").kind == "HTTP 500"


def read(raw: bytes, method: str = "POST") -> tuple[int, bytes, bool]:
    async def go() -> tuple[int, bytes, bool]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await _read_response(reader, method)

    return asyncio.run(go())


def test_responses_are_read_by_length_chunks_or_to_the_end() -> None:
    assert read(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}extra") == (201, b"{}", True)
    assert read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n") == \
        (200, b"abcde", True)
    assert read(b"HTTP/1.1 204 No Content\r\nETag: \"3\"\r\n\r\n") == (204, b"", True)
    assert read(b"HTTP/1.1 503 Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n") == (503, b"", False)
    assert read(b"HTTP/1.0 200 OK\r\n\r\nall of it") == (200, b"all of it", False)


def test_the_pool_reuses_connections_and_replaces_ones_the_server_closed() -> None:
    async def go() -> tuple[list[str], int]:
        connections = 0
        closed = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            for _ in range(3):  # then close, as a server's keep-alive timeout would
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
            writer.close()
            await writer.wait_closed()
            closed.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Http1Pool(f"http://127.0.0.1:{port}", 4)
        kinds = []
        for i in range(7):
            kinds.append((await send_http(pool, "POST", "/objects", {}, b"{}", 5.0)).kind)
            if i % 3 == 2:  # the server closes this connection now: let its FIN reach the idle connection
                await closed.wait()
                closed.clear()
                for _ in range(5):
                    await asyncio.sleep(0)
        await pool.close()
        server.close()
        await server.wait_closed()
        return kinds, connections

    kinds, connections = asyncio.run(go())
    assert kinds == ["202"] * 7
    assert connections == 3


def test_a_fleet_pool_opens_a_connection_per_request_and_asks_the_server_to_close_it() -> None:
    async def go() -> tuple[list[str], int, list[bytes]]:
        connections, heads = 0, []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            # Keep-alive from the server's side: only the client's Connection: close ends it.
            writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            await reader.read()  # until the client closes
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Http1Pool(f"http://127.0.0.1:{port}", 4, reuse=False)
        kinds = [(await send_http(pool, "POST", "/objects", {}, b"{}", 5.0)).kind for _ in range(3)]
        await pool.close()
        server.close()
        await server.wait_closed()
        return kinds, connections, heads

    kinds, connections, heads = asyncio.run(go())
    assert kinds == ["202"] * 3
    assert connections == 3
    assert all(b"\r\nConnection: close\r\n" in h for h in heads)
