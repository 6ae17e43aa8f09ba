"""The status page's charts in headless Chromium, behind the live pipeline (the rocksdb validator on the session's
Spark, the DB projection, the API under uvicorn): they draw from the vendored uPlot, move while commands flow, show
the validator's real state, and the browser logs no error."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from app.api.callers.auth import OPERATE
from app.api.main import create_app
from app.parked import lot
from app.settings import Settings
from app.validator.topic_io import produce
from commands import Command, CreateObject, UpdateObject
from schemas import codec
from tests.integration.browser import chromium, console_errors
from tests.integration.test_api_support import live_pipeline, served, token
from tests.integration.validator_oracle import send_commands

pytestmark = pytest.mark.integration

CHARTS = ("chart_flow", "chart_latency", "chart_lag", "chart_state_rows", "chart_state_memory")


def trickle(settings: Settings, stop: threading.Event) -> None:
    """Send 30 commands (creates and updates, issued now) twice a second until ``stop``."""
    while not stop.is_set():
        cmds: list[Command] = []
        for _ in range(15):
            oid, now = uuid.uuid4().hex, datetime.now(UTC)
            cmds += [CreateObject(f"{oid}-c", oid, "alice", now, document="{}"),
                     UpdateObject(f"{oid}-u", oid, "alice", now, patch='{"a": 1}')]
        send_commands(settings, cmds)
        stop.wait(0.5)


@pytest.fixture
def api(spark, settings: Settings) -> Iterator[str]:  # noqa: ANN001
    with live_pipeline(spark, settings), served(create_app(settings)) as url:
        yield url


def chart_points(driver, chart: str) -> list[int]:  # noqa: ANN001
    """Per series of ``chart``: how many points are not null (x first)."""
    return driver.execute_script(
        "const c = window.arbiterCharts[arguments[0]];"
        "return c ? c.plot.data.map((s) => s.filter((v) => v !== null && v !== undefined).length) : null;", chart)


def wait_points(driver, ok, timeout: float = 60) -> dict[str, list[int] | None]:  # noqa: ANN001
    """Poll ``chart_points`` of every chart until ``ok`` holds of them (or ``timeout``); return the last seen."""
    deadline = time.monotonic() + timeout
    while not ok(pts := {c: chart_points(driver, c) for c in CHARTS}) and time.monotonic() < deadline:
        time.sleep(0.3)
    return pts


def wait_text(driver, element: str, expected: str, timeout: float = 60) -> str:  # noqa: ANN001
    """Wait until element ``element`` of the page reads ``expected``; return what it reads last."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while (text := driver.find_element(By.ID, element).text) != expected and time.monotonic() < deadline:
        time.sleep(0.3)
    return text


def test_charts_draw_and_move_with_load(api: str, settings: Settings, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    assert httpx.get(f"{api}/vendor/uPlot.iife.min.js", timeout=5).status_code == 200
    assert httpx.get(f"{api}/vendor/nothing.js", timeout=5).status_code == 404
    stop = threading.Event()
    producer = threading.Thread(target=trickle, args=(settings, stop), daemon=True)
    producer.start()
    try:
        with chromium(tmp_path / "profile") as driver:
            driver.get(f"{api}/#token={token(settings, 'operator', (OPERATE,))}")
            # The page draws a point a second: wait (rather than sleep a fixed time) until every chart has points,
            # then until each has more and the flow chart looks different; the assertions below say what must hold.
            before = wait_points(driver, lambda pts: all(pts[c] and pts[c][0] > 0 for c in CHARTS))
            assert all(before[c] for c in CHARTS), f"charts missing after 60 s: {before}"
            shot1 = driver.find_element(By.ID, "chart_flow").screenshot_as_png
            after = wait_points(driver, lambda pts: all(pts[c] and pts[c][0] > before[c][0] for c in CHARTS) and
                                pts["chart_flow"][1] > 0 and pts["chart_latency"][1] > 0 and
                                pts["chart_state_rows"][1] > 0)
            shot2, redrawn = shot1, time.monotonic() + 30
            while shot2 == shot1 and time.monotonic() < redrawn:
                time.sleep(0.3)
                shot2 = driver.find_element(By.ID, "chart_flow").screenshot_as_png
            driver.save_screenshot(str(tmp_path / "status.png"))
            canvases = {c: len(driver.find_elements(By.CSS_SELECTOR, f"#{c} canvas")) for c in CHARTS}
            state_rows = driver.find_element(By.ID, "s_rows").text
            # The parking-lot panel: two undecodable records parked, then one redriven (fixed), one discarded.
            empty = driver.find_element(By.ID, "parked").text
            garbage = produce(settings, [(b"obj-x", b"\xff garbage"), (b"obj-y", b"\xfe junk")])
            origins = [f"{settings.topic_commands}[{p}]@{o}" for p, o in garbage]
            parked_before = wait_text(driver, "pl_parked", "2")
            table = driver.find_element(By.ID, "parked").text
            fixed = CreateObject("fixed-x", "obj-x", "alice", datetime.now(UTC), document="{}")
            lot.redrive(settings, origins[0], codec.encode_command(fixed), operator="test")
            lot.discard(settings, origins[1], operator="test")
            after_actions = [wait_text(driver, f"pl_{k}", "1") for k in ("redriven", "discarded")]
            parked_after = driver.find_element(By.ID, "pl_parked").text
            errors = console_errors(driver)
    finally:
        stop.set()
        producer.join(30)
    assert not errors, errors
    assert canvases == dict.fromkeys(CHARTS, 1), canvases
    for c in CHARTS:
        assert before[c] is not None and after[c][0] > before[c][0], (c, before[c], after[c])
    assert after["chart_flow"][1] > 0, "no commands/s points while commands flowed"
    assert after["chart_latency"][1] > 0 and after["chart_state_rows"][1] > 0, after
    assert len(after["chart_lag"]) == 1 + settings.partitions, "one lag series per partition"
    assert shot1 != shot2, "the flow chart did not change while commands flowed"
    assert state_rows not in ("–", "0"), f"the rocksdb backend's state rows are not shown: {state_rows!r}"
    assert empty == "nothing parked", empty
    assert parked_before == "2", parked_before
    for origin, size in zip(origins, (9, 6), strict=True):
        assert f"{origin} MALFORMED parked {settings.parked_topic}[" in table and f" {size} " in table, table
    assert after_actions == ["1", "1"] and parked_after == "0", (after_actions, parked_after)
