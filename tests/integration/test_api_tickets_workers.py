"""``arbiter api --workers 2``: a change-feed ticket opens one stream, whichever worker each attempt reaches.

Each ticket is sent by 8 concurrent connections at once (the workers compete to accept each); exactly one of
them is answered 200 and the others 401, and the opened streams were served by both workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from app.local.kafka_broker import free_port
from app.settings import Settings
from tests.integration.test_api_support import cli_api_env, token
from tests.integration.test_api_workers_metrics import _per_worker

pytestmark = pytest.mark.integration

TICKETS, RACERS = 12, 8


def _attempt(base: str, ticket: str, gate: threading.Barrier, statuses: list[int], streams: list[httpx.Client]) -> None:
    """Open the feed with ``ticket`` on a fresh connection once every racer is ready; keep an opened stream open."""
    client = httpx.Client(timeout=httpx.Timeout(30))
    streams.append(client)
    gate.wait()
    r = client.send(client.build_request("GET", f"{base}/changes", params={"ticket": ticket}), stream=True)
    statuses.append(r.status_code)
    if r.status_code != 200:
        r.read()
        r.close()


def test_a_ticket_opens_one_stream_across_workers(settings: Settings) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api", "--workers", "2"], env=cli_api_env(settings, port),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    alice = {"Authorization": f"Bearer {token(settings, 'alice')}"}
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the API did not start"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code in (200, 503):
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        for _ in range(TICKETS):
            ticket = httpx.post(f"{base}/changes/tickets", headers=alice, timeout=30).json()["ticket"]
            statuses: list[int] = []
            streams: list[httpx.Client] = []
            gate = threading.Barrier(RACERS)
            threads = [threading.Thread(target=_attempt, args=(base, ticket, gate, statuses, streams))
                       for _ in range(RACERS)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(60)
            assert sorted(statuses) == [200] + [401] * (RACERS - 1), statuses
            for c in streams:
                c.close()
        metrics_dir = settings.path(settings.var_dir) / "api-metrics" / str(proc.pid)
        served = _per_worker(metrics_dir, "/changes")
        assert len(served) == 2 and all(served.values()), f"one worker took every stream: {served}"
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
