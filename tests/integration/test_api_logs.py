"""``arbiter api``'s output is a log (``var/logs/api.log`` under ``arbiter run``): no bearer token ever appears in it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from app.local.kafka_broker import free_port
from app.settings import Settings
from tests.integration.test_api_support import cli_api_env, token

pytestmark = pytest.mark.integration


def test_the_api_logs_no_token(settings: Settings) -> None:
    port = free_port()
    env = cli_api_env(settings, port)  # the development placeholder secret, on loopback: allowed, the case that printed
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    used = [token(settings, p) for p in ("alice", "operator")]
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the API did not start"
            try:
                httpx.get(f"{base}/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        alice, operator = ({"Authorization": f"Bearer {t}"} for t in used)
        assert httpx.post(f"{base}/objects", json={"document": {}}, headers=alice).status_code == 202
        assert httpx.get(f"{base}/objects/nope", headers=alice).status_code == 404
        assert httpx.get(f"{base}/status.json", headers=operator).status_code == 200
        assert httpx.get(f"{base}/metrics", headers=alice).status_code == 403
        assert httpx.get(f"{base}/objects/x", headers={"Authorization": f"Bearer {used[0]}x"}).status_code == 401
        assert httpx.post(f"{base}/objects", content=b'{"document": NaN}', headers={
            **alice, "Content-Type": "application/json"}).status_code == 422
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert "serving the Command API" in out, out
    assert "Bearer" not in out and "eyJ" not in out, out  # eyJ: the base64 of a token's '{"' payload
    for t in used:
        assert t not in out and t.split(".")[1] not in out
