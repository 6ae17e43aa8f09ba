"""The README's first command end to end: ``arbiter run`` plays its scenario, serves the status page, stops cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.kafka_broker import free_port
from app.settings import Settings

pytestmark = pytest.mark.integration


def _env(settings: Settings, api_port: int) -> dict[str, str]:
    return {**os.environ,
            "ARBITER_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "ARBITER_KAFKA_PORT": str(free_port()),  # not the session broker's: `run` must not manage it
            "ARBITER_TOPIC_COMMANDS": settings.topic_commands,
            "ARBITER_TOPIC_EVENTS": settings.topic_events,
            "ARBITER_TOPIC_REJECTIONS": settings.topic_rejections,
            "ARBITER_PARTITIONS": str(settings.partitions),
            "ARBITER_VAR_DIR": str(settings.path(settings.var_dir)),
            "ARBITER_API_PORT": str(api_port),
            "ARBITER_TRIGGER_INTERVAL": "200 milliseconds",
            "PYTHONUNBUFFERED": "1"}


class Run:
    def __init__(self, proc: subprocess.Popen[str], lines: list[str], api: str, var: Path) -> None:
        self.proc, self.lines, self.api, self.var = proc, lines, api, var


@pytest.fixture
def pipeline(settings: Settings) -> Iterator[Run]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run"], env=_env(settings, port), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: list[str] = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 420
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("Serving") or time.monotonic() > deadline:
            break
    run = Run(proc, lines, f"http://127.0.0.1:{port}", settings.path(settings.var_dir))
    try:
        assert any(line.startswith("Serving") for line in lines), "\n".join(lines[-60:])
        yield run
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a user would
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _row(lines: list[str], step: str) -> list[str]:
    for line in lines:
        if line.startswith(step):
            return re.split(r"\s{2,}", line.strip())
    raise AssertionError(f"no row {step!r} in:\n" + "\n".join(lines))


def test_scenario_status_page_and_clean_stop(pipeline: Run, settings: Settings, tmp_path: Path) -> None:
    out = pipeline.lines
    assert _row(out, "create the shared document")[2:5] == ["alice", "201", "accepted"]
    races = [_row(out, f"race: {w} updates at If-Match 2") for w in ("alice", "bob")]
    assert sorted(r[3] for r in races) == ["200", "412"]  # exactly one wins the race
    assert "VERSION_CONFLICT" in [r[5] for r in races if r[3] == "412"][0]
    assert _row(out, "bob updates with a stale If-Match 1")[3:6] == ["412", "rejected", "VERSION_CONFLICT"]
    first, retry = _row(out, "alice updates (Idempotency-Key K)"), _row(out, "alice's client retries K")
    assert first[3] == retry[3] == "200" and first[-1] == retry[-1]  # the retry answers the original version
    assert _row(out, "mallory (not an editor) edits")[3:6] == ["403", "rejected", "FORBIDDEN"]
    assert _row(out, "malformed JSON body")[3] == "400"
    assert _row(out, "bob updates after delete")[3:6] == ["410", "rejected", "DELETED"]
    assert _row(out, "garbage bytes put on the topic")[3:5] == ["rejected", "MALFORMED"]
    assert any("HTTP 410" in line for line in out) and any("HTTP 200" in line and "hello, world" in line for line in out)

    pids = {p.stem: int(p.read_text()) for p in (pipeline.var / "run").glob("*.pid")}
    assert {"validator", "api", "project-db", "project-audit", "project-log"} <= set(pids)

    load = subprocess.Popen([sys.executable, "-m", "app.cli", "load", "--via", "topic", "--rate", "150",
                             "--duration", "12", "--objects", "50", "--wait", "20"],
                            env=_env(settings, 0), text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        figures = _watch_status_page(pipeline.api, tmp_path)
    finally:
        summary, _ = load.communicate(timeout=120)
    assert load.returncode == 0, summary
    assert "accepted" in summary and "decision latency p50" in summary, summary
    assert figures[0] != figures[-1], "the status page's figures did not change while load ran"

    os.killpg(pipeline.proc.pid, signal.SIGINT)
    pipeline.proc.wait(timeout=90)
    for name, pid in pids.items():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # every child it started is gone
        assert not (pipeline.var / "run" / f"{name}.pid").exists()


def _watch_status_page(api: str, shots: Path) -> list[tuple[str, ...]]:
    """Open the status page in headless Chromium; return the figures seen over time; fail on console errors."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    assert httpx.get(f"{api}/status.json", timeout=5).status_code == 200
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={shots / 'profile'}", "--window-size=1200,1400"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    seen: list[tuple[str, ...]] = []
    try:
        driver.get(f"{api}/")
        ids = ("total_commands", "total_events", "commands_in_per_s", "v_batch_id")
        for i in range(6):
            time.sleep(2.0)
            driver.save_screenshot(str(shots / f"status-{i}.png"))
            seen.append(tuple(driver.find_element(By.ID, k).text for k in ids))
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        assert driver.find_element(By.ID, "hot").text.strip(), "no hot keys shown"
    finally:
        driver.quit()
    return seen
