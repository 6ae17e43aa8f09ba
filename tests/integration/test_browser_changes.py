"""A page on another origin subscribes to the change feed in real headless Chromium: CORS and a change-feed ticket,
no proxy injecting a token. The browser's own EventSource survives two cut connections by its own reconnect
(Last-Event-ID, the same ticket, admitted as a resume) and gets every change exactly once, in order. A reused and an
expired ticket, and a page on an origin not in ARBITER_CORS_ALLOW_ORIGINS, are refused; no ticket reaches the
access log; and after a kill -9 of a real ``arbiter api`` process, the browser's own reconnect resumes the feed on
the API started again. Behind it the live pipeline: the real validator and DB projection (the shared running Arbiter; the
test's objects and principal carry its tag), an audit projection and an API of this test's (its CORS origin,
ticket lifetime and heartbeat) on the shared topics."""

from __future__ import annotations

import http.server
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.main import create_app
from app.local.kafka_broker import free_port
from arbiter_client import Client
from tests.integration.browser import chromium
from tests.integration.tcp_cut import relay_to
from tests.integration.test_api_support import (
    RunningArbiter,
    audit_projection_running,
    cli_api_env,
    served,
    token,
)
from tests.integration.validator_oracle import stop_validator

pytestmark = pytest.mark.integration

PAGE = b"""<!doctype html><meta charset="utf-8"><title>feed</title><script>
const params = new URLSearchParams(location.hash.slice(1));
const api = params.get("api"), token = params.get("token");
window.log = {events: [], opens: 0, errors: []};
window.ticket = async function (lastEventId) {
  const headers = {Authorization: "Bearer " + token, "Content-Type": "application/json"};
  const body = JSON.stringify(lastEventId ? {last_event_id: lastEventId} : {});
  const r = await fetch(api + "/changes/tickets", {method: "POST", headers, body});
  if (r.status !== 201) throw new Error("ticket: HTTP " + r.status);
  return (await r.json()).ticket;
};
window.subscribe = function (ticket) {
  const es = new EventSource(api + "/changes?ticket=" + encodeURIComponent(ticket));
  es.onopen = () => { window.log.opens++; };
  es.addEventListener("change", e => window.log.events.push({id: e.lastEventId, data: JSON.parse(e.data)}));
  es.onerror = () => { window.log.errors.push(es.readyState); };
  window.es = es;
  return es;
};
// what a page does when its resume is refused (readyState CLOSED): a new ticket that carries the last id seen
window.resubscribe = async function () {
  window.es.close();
  const events = window.log.events;
  window.subscribe(await window.ticket(events[events.length - 1].id));
};
// a second EventSource, only to see whether the browser is refused (readyState 2 = CLOSED for good)
window.probe = function (ticket) {
  return new Promise(done => {
    const es = new EventSource(api + "/changes?ticket=" + encodeURIComponent(ticket));
    es.onopen = () => { es.close(); done("open"); };
    es.onerror = () => { if (es.readyState === 2) done("closed"); };
  });
};
</script>"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:  # noqa: ANN401
        pass


@contextmanager
def page_origin() -> Iterator[str]:
    """Serve the page on a free loopback port of its own: an origin other than the API's."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def served_with_access_log(app: Any) -> Iterator[tuple[str, list[str]]]:  # noqa: ANN401 - an ASGI app
    """Serve ``app`` under uvicorn with its access log on (what ``--log-level info`` prints); yield URL and lines."""
    access = logging.getLogger("uvicorn.access")
    handler, level = _Lines(), access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        with served(app, log_config=None, log_level=None, access_log=True) as url:
            yield url, handler.lines
    finally:
        access.removeHandler(handler)
        access.setLevel(level)


def until(condition: Any, what: str, timeout: float = 60.0) -> Any:  # noqa: ANN401
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def test_a_page_on_another_origin_subscribes_resumes_and_is_refused_what_it_should_be(
        arbiter: RunningArbiter, tmp_path: Path) -> None:
    doc, other = f"doc-{arbiter.tag}", f"other-{arbiter.tag}"
    with page_origin() as origin, page_origin() as foreign:
        s = arbiter.settings.model_copy(update={"changes_heartbeat_s": 1.0, "cors_allow_origins": [origin],
                                                "changes_ticket_ttl_s": 5.0})
        bearer = token(s, f"alice-{arbiter.tag}")
        with audit_projection_running(s), \
                served_with_access_log(create_app(s)) as (url, access_log), relay_to(url) as (api, relay), \
                Client(url, bearer, wait_s=30) as alice, chromium(tmp_path / "profile") as driver:
            driver.get(f"{origin}/#api={api}&token={bearer}")
            ticket = driver.execute_async_script("window.ticket().then(arguments[0], e => arguments[0](String(e)))")
            assert ticket.startswith("t1."), ticket
            driver.execute_script("window.subscribe(arguments[0])", ticket)
            until(lambda: driver.execute_script("return window.log.opens") == 1, "the EventSource to open")
            until(lambda: b": live\n\n" in relay.answered, "the stream to be live")  # before the first write

            def seen() -> list[dict[str, Any]]:
                return driver.execute_script("return window.log.events")  # type: ignore[no-any-return]

            alice.create({"n": 0}, doc)
            alice.create({"n": 0}, other)
            for i in range(4):
                alice.update(doc, {"n": i + 1})
            until(lambda: len(seen()) >= 6, "6 changes in the page")
            relay.cut()  # the browser reconnects by itself, with Last-Event-ID and the same URL (ticket)
            for i in range(6):
                alice.update(other, {"n": i + 1})
            until(lambda: len(seen()) >= 12 and driver.execute_script("return window.log.opens") == 2,
                  "12 changes over two connections")
            relay.cut()
            for i in range(10):
                alice.update(doc if i % 2 else other, {"m": i})
            until(lambda: len(seen()) >= 22, "22 changes over three connections")
            time.sleep(1.0)  # nothing more may come
            events = seen()
            assert driver.execute_script("return window.log.opens") == 3 and relay.accepted >= 3
            got = [(e["data"]["object_id"], e["data"]["version"]) for e in events]
            assert len(got) == len(set(got)) == 22, got  # no duplicate
            for oid, last in ((doc, 10), (other, 12)):
                assert [v for o, v in got if o == oid] == list(range(1, last + 1)), got  # no gap, in order
            assert len({e["id"] for e in events}) == 22

            # the page's fallback when a resume is refused: closed, two changes missed, a new ticket with its last id
            driver.execute_script("window.es.close()")
            alice.update(doc, {"gap": 1})
            alice.update(other, {"gap": 1})
            driver.execute_async_script("window.resubscribe().then(arguments[0])")
            until(lambda: len(seen()) >= 24, "the two changes made while the page was away")
            time.sleep(1.0)
            got = [(e["data"]["object_id"], e["data"]["version"]) for e in seen()]
            # two objects' changes: each object's in order, the two objects' relative order is not promised
            assert sorted(got[22:]) == sorted([(doc, 11), (other, 13)]) and len(got) == 24, got

            # a reused ticket (a fresh open, no Last-Event-ID) and an expired one: the browser is refused for good
            def probe(t: str) -> str:
                return driver.execute_async_script(  # type: ignore[no-any-return]
                    "window.probe(arguments[0]).then(arguments[1])", t)

            once = driver.execute_async_script("window.ticket().then(arguments[0])")
            assert (probe(once), probe(once)) == ("open", "closed")
            r = httpx.get(f"{url}/changes", params={"ticket": once}, headers={"Origin": origin})
            assert r.status_code == 401 and "already used" in r.json()["detail"], r.text
            assert r.headers["access-control-allow-origin"] == origin  # the page may read why
            stale = driver.execute_async_script("window.ticket().then(arguments[0])")
            time.sleep(s.changes_ticket_ttl_s + 0.5)
            assert probe(stale) == "closed"
            r = httpx.get(f"{url}/changes", params={"ticket": stale}, headers={"Origin": origin})
            assert r.status_code == 401 and "expired" in r.json()["detail"], r.text
            assert probe(ticket) == "closed"  # the first ticket, whose stream still runs

            # a page on an origin not allowed: its fetch is blocked by the browser, its EventSource too
            driver.get(f"{foreign}/#api={api}&token={bearer}")
            blocked = driver.execute_async_script("window.ticket().then(arguments[0], e => arguments[0]('E:' + e))")
            assert blocked.startswith("E:TypeError"), blocked
            valid = httpx.post(f"{url}/changes/tickets", headers={"Authorization": f"Bearer {bearer}"}).json()["ticket"]
            assert driver.execute_async_script("window.probe(arguments[0]).then(arguments[1])", valid) == "closed"
            preflight = httpx.options(f"{url}/changes/tickets", headers={
                "Origin": foreign, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization"})
            assert preflight.status_code == 400 and "access-control-allow-origin" not in preflight.headers

        tickets = (ticket, once, stale, valid)
        feed_lines = [line for line in access_log if "/changes" in line]
        assert any("GET /changes " in line for line in feed_lines), access_log[-20:]
        leaked = [line for line in access_log if any(t in line or t[:40] in line for t in tickets)]
        assert not leaked and not [line for line in feed_lines if "ticket=" in line], leaked or feed_lines


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code in (200, 503)
    except httpx.TransportError:
        return False


def test_the_browsers_own_reconnect_resumes_its_feed_after_the_api_is_killed(
        arbiter: RunningArbiter, tmp_path: Path) -> None:
    """kill -9 of the ``arbiter api`` process serving a page's open stream, then the API started again on its port:
    the browser's own EventSource reconnect (the same ticket, Last-Event-ID; no page code runs) is admitted as a
    resume, and the page gets every change exactly once, in order, with its first ticket (issue 50, item 7)."""
    doc = f"killed-{arbiter.tag}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with page_origin() as origin:
        s = arbiter.settings
        bearer = token(s, f"alice-{arbiter.tag}")
        env = {**cli_api_env(s, port), "ARBITER_CORS_ALLOW_ORIGINS": origin, "ARBITER_CHANGES_HEARTBEAT_S": "1"}
        procs: list[subprocess.Popen[bytes]] = []

        def start_api(n: int) -> subprocess.Popen[bytes]:
            with (tmp_path / f"api-{n}.log").open("wb") as out:
                proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env, stdout=out,  # noqa: S603
                                        stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(proc)
            until(lambda: proc.poll() is not None or _answers(base), "the API to answer", 120)
            assert proc.poll() is None, (tmp_path / f"api-{n}.log").read_text()[-3000:]
            return proc

        try:
            with audit_projection_running(s), chromium(tmp_path / "profile") as driver:
                first = start_api(1)
                with Client(base, bearer, wait_s=30) as alice:
                    driver.get(f"{origin}/#api={base}&token={bearer}")
                    ticket = driver.execute_async_script(
                        "window.ticket().then(arguments[0], e => arguments[0](String(e)))")
                    assert ticket.startswith("t1."), ticket
                    driver.execute_script("window.subscribe(arguments[0])", ticket)
                    until(lambda: driver.execute_script("return window.log.opens") == 1, "the EventSource to open")

                    def seen() -> list[dict[str, Any]]:
                        return driver.execute_script("return window.log.events")  # type: ignore[no-any-return]

                    alice.create({"n": 0}, doc)
                    for i in range(3):
                        alice.update(doc, {"n": i + 1})
                    until(lambda: len(seen()) >= 4, "4 changes in the page")
                os.killpg(first.pid, signal.SIGKILL)  # the API dies with the stream open: nothing writes its end
                first.wait(30)
                start_api(2)
                with Client(base, bearer, wait_s=30) as alice:
                    for i in range(3, 6):
                        alice.update(doc, {"n": i + 1})
                    until(lambda: len(seen()) >= 7 and driver.execute_script("return window.log.opens") == 2,
                          "7 changes over two connections, the second opened by the browser itself")
                time.sleep(1.0)  # nothing more may come
                events = seen()
                got = [(e["data"]["object_id"], e["data"]["version"]) for e in events]
                assert got == [(doc, v) for v in range(1, 8)], got  # every change once, in order, none lost
                assert driver.execute_script("return window.es.readyState") == 1  # OPEN: the first ticket's stream
                assert 2 not in driver.execute_script("return window.log.errors")  # never CLOSED for good
        finally:
            for proc in procs:
                stop_validator(proc)  # SIGTERM, then SIGKILL of its group: any child process, as the validator's
