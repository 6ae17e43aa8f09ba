"""``arbiter api --workers 2``: one scrape of ``/metrics`` counts the requests of both workers (issue 25).

Before, each worker served its own registry and a scrape showed whichever worker accepted it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from app.local.kafka_broker import free_port
from app.settings import Settings
from tests.integration.test_api_support import cli_api_env, token

pytestmark = pytest.mark.integration

ROUTE = "/objects/{object_id}"


def _requests_in(families: object, route: str = ROUTE) -> float:
    return sum(s.value for f in families for s in f.samples  # type: ignore[attr-defined]
               if s.name == "arbiter_api_requests_total" and s.labels.get("route") == route)


def _per_worker(metrics_dir: Path, route: str = ROUTE) -> dict[str, float]:
    # each worker's own file, read with the library's merge: who served how many
    return {f.name: _requests_in(MultiProcessCollector.merge([str(f)]), route) for f in metrics_dir.glob("counter_*.db")}


def test_one_scrape_counts_the_requests_of_every_worker(settings: Settings) -> None:
    port = free_port()
    env = cli_api_env(settings, port)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api", "--workers", "2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    metrics_dir = settings.path(settings.var_dir) / "api-metrics" / str(proc.pid)
    alice = {"Authorization": f"Bearer {token(settings, 'alice')}"}
    sent = 0
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the API did not start"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code in (200, 503):
                    break
            except httpx.TransportError:
                time.sleep(0.2)

        def read() -> None:  # a fresh connection each: the workers compete to accept it
            httpx.get(f"{base}/objects/nope", headers=alice, timeout=30)

        # concurrent rounds until both workers served some (each worker's own file says so)
        for _ in range(50):
            threads = [threading.Thread(target=read) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            sent += len(threads)
            served = _per_worker(metrics_dir)
            if len(served) == 2 and all(served.values()):
                break
        assert len(served) == 2 and all(served.values()), served
        # a worker counts a request once its answer is sent: the client may see the answer a moment before the
        # count reaches the worker's file, so wait for the count (the run of 2026-11-27 read 15 of 16)
        deadline = time.monotonic() + 30
        while sum(served.values()) < sent and time.monotonic() < deadline:
            time.sleep(0.05)
            served = _per_worker(metrics_dir)
        assert sum(served.values()) == sent, (served, sent)

        scrape = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token(settings, 'operator')}"},
                           timeout=30)
        assert scrape.status_code == 200, scrape.text
        assert _requests_in(text_string_to_metric_families(scrape.text)) == sent, (served, sent)
        assert "arbiter_api_waiters 0.0" in scrape.text  # gauges: summed over the live workers, one series
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert not metrics_dir.exists(), out  # a fresh directory per start, removed at exit
