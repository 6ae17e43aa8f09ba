"""The README's first command end to end: ``arbiter run`` plays its scenario, serves the status page, stops cleanly
(the package's played run, whose history test_verify_run replays next)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from app.local.kafka_broker import free_port
from app.run.scenario import NOTE_INDENT
from app.settings import Settings, checkpoint_uri
from app.validator.rocks.client import lanes, socket_path
from projections import archived
from tests.docs_snippets import run_shell
from tests.integration.browser import chromium, console_errors
from tests.integration.played_run import ARCHIVE_EVERY, Run, settle, start_run, stop_run
from tests.integration.played_run import run_env as _env

pytestmark = pytest.mark.integration


@pytest.fixture
def pipeline(played_run: Run, request: pytest.FixtureRequest) -> Iterator[Run]:
    """The package's played run, serving (this test stops it); a run of this test's own if another test took it."""
    if not played_run.claimed:
        played_run.claimed = True
        run = played_run
    else:
        run = start_run(request.getfixturevalue("settings"))
    try:
        assert any(line.startswith("Serving") for line in run.lines), "\n".join(run.lines[-60:])
        yield run
    finally:
        stop_run(run, timeout=90)  # stopped already unless the test failed before its clean stop


def _row(lines: list[str], step: str) -> list[str]:
    """The table row for ``step`` as [step, who, HTTP, outcome, reason, version], cut by the dash line's columns."""
    dashes = next(i for i, line in enumerate(lines) if line.startswith("----"))
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[dashes])]
    spans[-1] = (spans[-1][0], 10_000)
    for i, line in enumerate(lines[dashes + 1:], dashes + 1):
        if line.startswith(step):
            row = [line[a:b].strip() for a, b in spans]
            note = lines[i + 1] if i + 1 < len(lines) else ""
            if note.startswith(NOTE_INDENT + "-> "):  # a refusing rule's name and message, under its row
                row[4] = f"{row[4]} {note.removeprefix(NOTE_INDENT + '-> ')}"
            return row
    raise AssertionError(f"no row {step!r} in:\n" + "\n".join(lines))


def assert_scenario(out: list[str]) -> None:
    """The scenario table shows the outcomes docs/getting-started.md shows (whichever read model served it)."""
    def decided(step: str, http: str) -> list[str]:
        """[outcome, reason, version]; HTTP is the direct answer, or 202 if the decision came after the wait."""
        row = _row(out, step)
        assert row[2] in (http, "202"), row
        return row[3:]

    assert _row(out, "create the shared document")[1] == "alice"
    assert decided("create the shared document", "201") == ["accepted", "", "1"]
    assert decided("share it with bob", "200") == ["accepted", "", "2"]
    assert decided("let mallory read it", "200") == ["accepted", "", "3"]
    races = sorted(_row(out, f"race: {w} updates at If-Match 3")[2:] for w in ("alice", "bob"))
    assert [r[1:] for r in races] == [["accepted", "", "4"], ["rejected", "VERSION_CONFLICT", "4"]], races
    assert decided("bob updates with a stale If-Match 2", "412") == ["rejected", "VERSION_CONFLICT", "4"]
    first, retry = decided("alice updates (Idempotency-Key K)", "200"), decided("alice's client retries K", "200")
    assert first == ["accepted", "", "5"]
    assert retry in (["accepted", "", "5"], ["rejected", "DUPLICATE", "5"])  # answered with the original outcome
    assert decided("bob sends alice's key K: his own command", "200") == ["accepted", "", "6"]
    assert decided("alice reuses K for another edit", "422")[:2] == ["rejected", "IDEMPOTENCY_KEY_REUSED"]
    assert decided("mallory (a reader) edits", "403")[:2] == ["rejected", "FORBIDDEN"]
    assert decided("eve (no access) edits", "404") == ["rejected", "NOT_FOUND", "0"]  # as for an unknown id
    assert _row(out, "eve reads it")[2:5] == ["404", "rejected", "NOT_FOUND"]
    assert _row(out, "malformed JSON body")[2:5] == ["400", "refused by API", "INVALID_JSON"]
    assert decided("alice deletes the document", "204") == ["accepted", "", "7"]
    assert decided("bob updates after delete", "410")[:2] == ["rejected", "DELETED"]
    assert _row(out, "garbage bytes put on the topic")[3:5] == ["rejected", "MALFORMED"]
    assert any("HTTP 410" in line for line in out) and any("HTTP 200" in line and "hello, world" in line for line in out)
    # The shared document's history as its owner reads it: seven versions, and her own refused reuse of key K.
    history = out[next(i for i, line in enumerate(out) if line.startswith("History of")) + 1:]
    versions = [line.split()[:2] for line in history if line.strip().startswith("v")]
    assert versions[:7] == [["v1", "CREATED"], ["v2", "EDITOR_GRANTED"], ["v3", "READER_GRANTED"], ["v4", "UPDATED"],
                            ["v5", "UPDATED"], ["v6", "UPDATED"], ["v7", "DELETED"]], history
    assert any("rejected" in line and "IDEMPOTENCY_KEY_REUSED" in line for line in history), history
    # The team's rules: the order example deployed, its status machine, immutable customer and finance guard, then a
    # higher limit deployed mid-scenario; every decision names the rules version it was decided under.
    deployed = _row(out, "ops deploys the order rules (PUT /rules)")
    assert deployed[3] in ("deployed", "already newest") and deployed[5].startswith("rules v"), deployed
    v1 = int(deployed[5].removeprefix("rules v"))
    assert decided("alice creates an order of 12,000", "201") == ["accepted", "", f"1 (rules v{v1})"]
    refused = decided("alice moves it draft -> approved", "422")
    assert refused[0] == "rejected" and refused[1].startswith("RULE_VIOLATED order:status-flow"), refused
    assert decided("alice submits it (draft -> submitted)", "200") == ["accepted", "", f"2 (rules v{v1})"]
    assert decided("alice changes its customer", "422")[1].startswith("RULE_VIOLATED order:customer-immutable")
    assert decided("alice shares it with fiona (finance)", "200") == ["accepted", "", f"3 (rules v{v1})"]
    over = decided("alice approves it (not finance)", "422")
    assert over[1] == "RULE_VIOLATED order:finance-approves-large: approval over 10,000 needs finance", over
    assert decided("fiona (finance) approves it", "200") == ["accepted", "", f"4 (rules v{v1})"]
    raised = _row(out, "ops raises the approval limit to 50,000")
    v2 = int(raised[5].removeprefix("rules v"))
    assert v2 > v1, (v1, v2)
    assert decided("alice creates another order of 12,000", "201") == ["accepted", "", f"1 (rules v{v2})"]
    assert decided("alice approves it (under 50,000 now)", "200") == ["accepted", "", f"3 (rules v{v2})"]
    # bob's change feed on his notes, opened before his update, shows the update arriving live.
    live = out[next(i for i, line in enumerate(out) if line.startswith("Live change feed")) + 1]
    assert live.strip().startswith('change v2 UPDATED by bob {"text":"hello, world"}'), live



#: The getting-started page, whose sample of ``./dev run``'s output this test holds to the scenario's own output.
GETTING_STARTED = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
#: The widest line of that sample: it fits a terminal.
SAMPLE_WIDTH = 120


def _sample_of(out: list[str], settings: Settings, api: str) -> list[str]:
    """The part of ``arbiter run``'s output the page shows (progress, table, read model, history, live feed), as a
    ``./dev run`` on defaults prints it: this run's topic names, paths and address put back to the defaults."""
    start = next(i for i, line in enumerate(out) if line.startswith("[2/6]"))
    end = next(i for i, line in enumerate(out) if line.startswith("Live change feed")) + 2
    defaults = Settings()
    swaps = [(str(settings.path(settings.var_dir)), "var"), (api, defaults.public_base_url)]
    swaps += [(getattr(settings, f), getattr(defaults, f)) for f in ("topic_commands", "topic_events", "topic_rejections")]
    swaps.append((f"({settings.partitions} partitions)", f"({defaults.partitions} partitions)"))
    swaps.append((f"every {ARCHIVE_EVERY})", f"every {defaults.archive_trigger_interval})"))
    lines = []
    for line in out[start:end]:
        for a, b in swaps:
            line = line.replace(a, b)
        lines.append(line.rstrip())
    return ["[1/6] Kafka broker on 127.0.0.1:9092 (data var/kafka) ...", "      ready (pid 12345)", *lines]


def _shape(lines: list[str]) -> list[str]:
    """What must not drift: every line with its numbers, ids' random tags and column padding taken out, and the two
    race rows left out (which racer wins varies)."""
    out = []
    for line in lines:
        if line.startswith(("race:", "-----")) or not line.strip():
            continue
        line = re.sub(r"-[0-9a-f]{6}\b", "-TAG", line)
        line = re.sub(r"\d+(\.\d+)?", "N", line)
        out.append(re.sub(r"\s{2,}", "  ", line.strip()))
    return out


def assert_docs_sample(out: list[str], settings: Settings, api: str) -> None:
    """docs/getting-started.md shows this run's output (numbers and tags aside), within SAMPLE_WIDTH columns.

    ``UPDATE_DOCS_SAMPLE=1`` writes this run's sample into the page instead (then review the diff and commit).
    """
    text = GETTING_STARTED.read_text("utf-8")
    m = re.search(r"^```text title=\"dev-run-output.txt\"\n(.*?)^```$", text, re.M | re.S)
    assert m, "getting-started.md lost its ```text title=\"dev-run-output.txt\" block"
    sample = _sample_of(out, settings, api)
    if os.environ.get("UPDATE_DOCS_SAMPLE") == "1":
        GETTING_STARTED.write_text(text[:m.start(1)] + "\n".join(sample) + "\n" + text[m.end(1):], "utf-8")
    shown = m.group(1).splitlines()
    assert max(map(len, shown)) <= SAMPLE_WIDTH, "the sample is wider than a terminal"
    assert max(map(len, sample)) <= SAMPLE_WIDTH, "arbiter run prints lines wider than a terminal"
    assert _shape(shown) == _shape(sample), ("the page's sample drifted from the scenario's output; rerun with "
                                             "UPDATE_DOCS_SAMPLE=1 and review the diff\n" + "\n".join(sample))


def test_scenario_status_page_and_clean_stop(pipeline: Run, tmp_path: Path) -> None:
    settings = pipeline.settings
    out = pipeline.lines
    print("\n".join(out))
    assert_scenario(out)
    assert_docs_sample(out, settings, pipeline.api)

    # the getting-started page's curl walkthrough, as printed, against this pipeline
    walk = run_shell("walkthrough.sh", {**_env(settings, 0), "ARBITER_API_URL": pipeline.api}, timeout=180)
    doc, history, refused = walk.splitlines()
    assert json.loads(doc) == {"title": "hello"}, walk
    assert [(e["version"], e["type"]) for e in json.loads(history)["events"]] == [(1, "CREATED"), (2, "UPDATED")], walk
    assert json.loads(refused)["code"] == "VERSION_CONFLICT", walk

    pids = {p.stem: int(p.read_text()) for p in (pipeline.var / "run").glob("*.pid")}
    assert {"validator", "api", "project-db", "project-audit", "project-log", "archive"} <= set(pids)

    load = subprocess.Popen([sys.executable, "-m", "app.cli", "load", "--via", "topic", "--rate", "150",
                             "--duration", "12", "--objects", "50", "--wait", "20"],
                            env=_env(settings, 0), text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        figures = _watch_status_page(pipeline.api, tmp_path, settings)
    finally:
        summary, _ = load.communicate(timeout=120)
    assert load.returncode == 0, summary
    assert "accepted" in summary and "decision latency p50" in summary, summary
    assert figures[0] != figures[-1], "the status page's figures did not change while load ran"
    # Every component `arbiter run` starts serves its /metrics on the port its setting names.
    scraped = {name: httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
               for name, port in pipeline.metrics.items()}
    assert re.search(r"^arbiter_shard_records_total\{partition=\"\d+\"\} [1-9]", scraped["validator"], re.M), \
        scraped["validator"][-3000:]
    for kind in ("db", "audit", "log"):
        assert re.search(rf'^arbiter_projection_records_total\{{projection="{kind}"\}} [1-9]', scraped[kind], re.M), \
            scraped[kind][-3000:]

    via_api = subprocess.run([sys.executable, "-m", "app.cli", "load", "--via", "api", "--api", pipeline.api,
                              "--rate", "40", "--duration", "3", "--objects", "10"],
                             env=_env(settings, 0), text=True, capture_output=True, timeout=180)
    assert via_api.returncode == 0, via_api.stderr[-2000:]
    accepted = re.search(r"accepted\s+(\d+)", via_api.stdout)
    assert accepted and int(accepted.group(1)) > 0, via_api.stdout

    # The validator's shard servers (rocksdb backend, the default) serve on Unix sockets named after the run's
    # checkpoint: a clean stop ends them with their validator and removes their socket files.
    sockets = [socket_path(settings, checkpoint_uri(settings), lane) for lane in range(lanes(settings))]
    assert any(p.exists() for p in sockets), f"no shard server socket of this run among {sockets}"
    digest = sockets[0].name.rsplit("-", 1)[0].encode()
    servers = [int(d) for d in os.listdir("/proc") if d.isdigit() and _cmdline_has(int(d), b"app.validator.rocks.server")
               and _cmdline_has(int(d), digest)]
    assert servers, "no shard server process runs for this run's checkpoint"
    settle(settings)  # its history whole in the topics, projections and archive: test_verify_run replays it
    os.killpg(pipeline.proc.pid, signal.SIGINT)
    pipeline.proc.wait(timeout=90)
    pipeline.settled = True
    for name, pid in pids.items():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # every child it started is gone
        assert not (pipeline.var / "run" / f"{name}.pid").exists()
    deadline = time.monotonic() + 60
    while [pid for pid in servers if Path(f"/proc/{pid}").exists()]:
        assert time.monotonic() < deadline, "the shard servers outlived their validator"
        time.sleep(0.1)
    assert not [p for p in sockets if p.exists()], "socket files left after a clean stop"
    # arbiter run stops its validator with SIGTERM: the driver leaves its lease group on the way out, so another
    # host need not wait for its session (test_validator_lease covers Ctrl-C on a validator run by hand).
    assert "left lease group" in (pipeline.var / "logs" / "validator.log").read_text()

    assert "archive stopped" in (pipeline.var / "logs" / "archive.log").read_text()  # SIGTERM stopped its query
    # The archive component copied the scenario's garbage record and its parked copy (read through the sink's log).
    archive = pq.read_table([str(f) for f in archived.files(pipeline.var / "archive")],
                            columns=["topic", "kind", "value", "decode_error"]).to_pylist()
    garbage = [r for r in archive if r["topic"] == settings.topic_commands and r["decode_error"] is not None]
    assert garbage and any(r["kind"] == "parked" for r in archive), archive[-5:]


def _cmdline_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _watch_status_page(api: str, shots: Path, settings: Settings) -> list[tuple[str, ...]]:
    """Open the status page in headless Chromium; return the figures seen over time; fail on console errors."""
    from selenium.webdriver.common.by import By

    from app.api.callers.auth import OPERATE
    from app.api.callers.identity import dev_token

    operator = dev_token(settings, "operator", (OPERATE,), 600)
    assert httpx.get(f"{api}/status.json", timeout=5).status_code == 401  # the status data is for operators
    deadline = time.monotonic() + 30
    while True:  # the scenario's garbage bytes were parked a moment ago; the page's figures trail by a second or two
        status = httpx.get(f"{api}/status.json", timeout=5, headers={"Authorization": f"Bearer {operator}"})
        assert status.status_code == 200
        lot = status.json()["parking_lot"]
        if (lot or {}).get("parked") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert lot["parked"] >= 1 and lot["recent"][0]["reason"] == "MALFORMED", lot
    seen: list[tuple[str, ...]] = []
    with chromium(shots / "profile") as driver:
        driver.get(f"{api}/#token={operator}")
        ids = ("total_commands", "total_events", "commands_in_per_s", "v_batch_id", "s_rows")

        def figures() -> tuple[str, ...]:
            return tuple(driver.find_element(By.ID, k).text for k in ids)

        # Watched until what the caller asserts holds: the page showed figures, then other figures while the load
        # runs, the rocksdb backend's state rows among them, and hot keys. The page refreshes every second or two.
        deadline = time.monotonic() + 60
        while not seen or seen[0][0].strip() in ("", "–") or seen[-1] == seen[0] or seen[-1][-1] in ("", "–", "0") \
                or not driver.find_element(By.ID, "hot").text.strip():
            if time.monotonic() > deadline:
                break  # the assertions below say what the page never showed
            if seen and seen[0][0].strip() in ("", "–"):
                seen.clear()  # not loaded yet: the first figures are the first the page showed
            figure = figures()
            if not seen or figure != seen[-1]:
                driver.save_screenshot(str(shots / f"status-{len(seen)}.png"))
                seen.append(figure)
            time.sleep(0.2)
        assert not console_errors(driver), console_errors(driver)
        assert driver.find_element(By.ID, "hot").text.strip(), "no hot keys shown"
    assert seen[-1][-1] not in ("–", "0"), f"the rocksdb backend's state rows are not shown: {seen[-1]}"
    return seen


def test_the_scenario_on_the_postgresql_read_model(settings: Settings) -> None:
    """``arbiter run --read-model postgresql`` (what ``./dev run --read-model postgresql`` runs): it starts its own
    PostgreSQL server, plays the same scenario with the same outcomes, reads the read model from PostgreSQL, and
    stops the server by its PID when it exits."""
    top = Path(tempfile.mkdtemp(prefix="arbiter-e2e-pg-"))
    top.chmod(0o755)  # the server runs as the postgres user under root
    env = {**_env(settings, free_port()), "ARBITER_POSTGRES_DIR": str(top / "pg"),
           "ARBITER_POSTGRES_PORT": str(free_port())}
    try:
        run = subprocess.run([sys.executable, "-m", "app.cli", "run", "--read-model", "postgresql",
                              "--exit-after-scenario", "--no-archive"], env=env, text=True, capture_output=True, timeout=480)
        out = run.stdout.splitlines()
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert any("PostgreSQL for the read model" in line for line in out), run.stdout
        assert any("db (read model on postgresql)" in line for line in out), run.stdout
        assert_scenario(out)
        assert not (top / "pg" / "postgres.pid").exists(), "the server it started is stopped"
        pid = (top / "pg" / "data" / "postmaster.pid")
        assert not pid.exists(), "PostgreSQL shut down cleanly"
        db_log = (settings.path(settings.var_dir) / "logs" / "project-db.log").read_text()
        assert "read model on postgresql" in db_log
    finally:
        from app.local.postgres_server import LocalPostgres

        LocalPostgres(top / "pg").stop()  # only if a failure above left it running
        shutil.rmtree(top, ignore_errors=True)
