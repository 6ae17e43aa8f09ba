"""The demo scenario of ``arbiter run``: what Arbiter does with racing, stale, retried, forbidden and broken input."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

from app.api.callers.auth import READ, RULES
from app.api.callers.identity import dev_token
from app.settings import Settings
from commands import ReasonCode
from schemas import codec
from schemas.wire import DecodeError

WAIT = "wait=20"


@dataclass
class Step:
    """One row of the scenario's table."""

    what: str
    principal: str
    http: int | str
    outcome: str
    reason: str
    version: str
    note: str = ""  # printed on a line of its own under the row: a refusing rule's name and message


class Scenario:
    """Plays the scripted scenario against a running API (and, for garbage bytes, the commands topic)."""

    def __init__(self, settings: Settings, base_url: str) -> None:
        self.s = settings
        self.http = httpx.Client(base_url=base_url, timeout=60.0)
        self.tokens = {p: dev_token(settings, p, ttl_s=3600) for p in ("alice", "bob", "mallory", "eve")}
        self.tokens["fiona"] = dev_token(settings, "fiona", ttl_s=3600, groups=("finance",))
        self.tokens["ops"] = dev_token(settings, "ops", scopes=(RULES, READ), ttl_s=3600)
        self.rows: list[Step] = []
        tag = uuid.uuid4().hex[:6]
        self.doc, self.notes = f"plan-{tag}", f"notes-{tag}"
        self.live: LiveChanges | None = None

    def _call(self, what: str, who: str, method: str, path: str, body: Any = None, *,  # noqa: ANN401
              if_match: int | None = None, key: str | None = None, raw: bytes | None = None,
              content_type: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}", "Prefer": WAIT}
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        if key is not None:
            headers["Idempotency-Key"] = key
        content = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if content is not None:
            headers["Content-Type"] = content_type or (
                "application/merge-patch+json" if method == "PATCH" else "application/json")
        r = self.http.request(method, path, headers=headers, content=content)
        row = _row(what, who, r)
        if r.status_code == 202:  # not decided within the wait: follow Location, as any client would
            row = self._follow(row, r.headers["Location"], who)
        self.rows.append(row)
        return r

    def _follow(self, row: Step, location: str, who: str, timeout: float = 180.0) -> Step:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.http.get(location, headers={"Authorization": f"Bearer {self.tokens[who]}"})
            if r.status_code == 200:
                o = r.json()
                version = "" if o.get("version") is None else str(o["version"])
                rules = r.headers.get("Arbiter-Rules-Version")  # as _row shows a decision under the team's rules
                if rules is not None:
                    version = f"{version} (rules v{rules})" if version else f"rules v{rules}"
                return Step(row.what, row.principal, "202", o["status"], o.get("reason") or "", version)
            time.sleep(0.5)
        return row

    def warm_up(self, progress: Callable[[str], None] = print) -> float:
        """Send one command and wait for its decision: the first micro-batch starts Spark's Python workers."""
        t0 = time.monotonic()
        self._call("warm-up", "alice", "POST", "/objects", {"id": f"warmup-{self.doc}", "document": {}})
        row = self.rows.pop()
        progress(f"      first decision ({row.outcome}) after {time.monotonic() - t0:.1f}s")
        return time.monotonic() - t0

    def play(self, progress: Callable[[str], None] = print) -> list[Step]:
        d, n = self.doc, self.notes
        self._call("create the shared document", "alice", "POST", "/objects",
                   {"id": d, "document": {"title": "Launch plan", "owner_note": "draft"}})
        self._call("share it with bob", "alice", "PUT", f"/objects/{d}/editors/bob")
        self._call("let mallory read it", "alice", "PUT", f"/objects/{d}/readers/mallory")
        with ThreadPoolExecutor(2) as pool:  # both read version 3 and race to write version 4
            races = [pool.submit(self._call, f"race: {w} updates at If-Match 3", w, "PATCH", f"/objects/{d}",
                                 {"status": f"{w}'s edit"}, if_match=3) for w in ("alice", "bob")]
            for f in races:
                f.result()
        self._call("bob updates with a stale If-Match 2", "bob", "PATCH", f"/objects/{d}", {"status": "stale"},
                   if_match=2)
        key = f"retry-{uuid.uuid4().hex[:8]}"
        self._call("alice updates (Idempotency-Key K)", "alice", "PATCH", f"/objects/{d}", {"reviewed": True}, key=key)
        self._call("alice's client retries K", "alice", "PATCH", f"/objects/{d}", {"reviewed": True}, key=key)
        self._call("bob sends alice's key K: his own command", "bob", "PATCH", f"/objects/{d}", {"reviewed": True},
                   key=key)
        self._call("alice reuses K for another edit", "alice", "PATCH", f"/objects/{d}", {"reviewed": False}, key=key)
        self._call("mallory (a reader) edits", "mallory", "PATCH", f"/objects/{d}", {"status": "hacked"})
        self._call("eve (no access) edits", "eve", "PATCH", f"/objects/{d}", {"status": "hacked"})
        self._call("eve reads it", "eve", "GET", f"/objects/{d}")
        self._call("malformed JSON body", "alice", "POST", "/objects", raw=b'{"id": "x", "document": ')
        created = self._call("bob creates his notes", "bob", "POST", "/objects", {"id": n, "document": {"text": "hello"}})
        self._read_your_write(n, "bob", created.headers.get("Arbiter-Position"))  # the feed answers known objects
        self.live = LiveChanges(self.http.base_url, n, self.tokens["bob"], until_version=2).start()
        self._call("bob updates his notes", "bob", "PATCH", f"/objects/{n}", {"text": "hello, world"})
        self._call("alice deletes the document", "alice", "DELETE", f"/objects/{d}")
        self._call("bob updates after delete", "bob", "PATCH", f"/objects/{d}", {"status": "too late"})
        self.rows.append(self._garbage())
        self.orders()
        return self.rows

    def orders(self) -> None:
        """The team's rules (README "Rules"): deploy the order example, walk an order through its status machine and
        its finance guard, then deploy a higher approval limit mid-scenario and approve under it."""
        first = self._deploy("ops deploys the order rules (PUT /rules)", ORDERS.read_bytes())
        o1, o2 = f"order-{self.doc}", f"order2-{self.doc}"
        body = {"title": "Laptops", "priority": 2, "customer": "acme", "amount": 12000, "status": "draft"}
        self._call("alice creates an order of 12,000", "alice", "POST", "/objects",
                   {"id": o1, "type": "order", "document": body})
        self._call("alice moves it draft -> approved", "alice", "PATCH", f"/objects/{o1}", {"status": "approved"})
        self._call("alice submits it (draft -> submitted)", "alice", "PATCH", f"/objects/{o1}", {"status": "submitted"})
        self._call("alice changes its customer", "alice", "PATCH", f"/objects/{o1}", {"customer": "globex"})
        self._call("alice shares it with fiona (finance)", "alice", "PUT", f"/objects/{o1}/editors/fiona")
        self._call("alice approves it (not finance)", "alice", "PATCH", f"/objects/{o1}", {"status": "approved"})
        self._call("fiona (finance) approves it", "fiona", "PATCH", f"/objects/{o1}", {"status": "approved"})
        raised = raised_limit(ORDERS.read_text())
        if first is not None:
            self._deploy("ops raises the approval limit to 50,000", raised.encode(), content_type="application/yaml")
        self._call("alice creates another order of 12,000", "alice", "POST", "/objects",
                   {"id": o2, "type": "order", "document": body})
        self._call("alice submits it", "alice", "PATCH", f"/objects/{o2}", {"status": "submitted"})
        self._call("alice approves it (under 50,000 now)", "alice", "PATCH", f"/objects/{o2}", {"status": "approved"})

    def _deploy(self, what: str, document: bytes, content_type: str = "application/yaml") -> int | None:
        """PUT the rules ``document`` as ops; one row naming the version; return it (None if refused)."""
        r = self.http.put("/rules", content=document, headers={"Authorization": f"Bearer {self.tokens['ops']}",
                                                               "Content-Type": content_type})
        if r.status_code in (200, 201):
            version = int(r.json()["version"])
            self.rows.append(Step(what, "ops", r.status_code, "deployed" if r.json()["new"] else "already newest",
                                  "", f"rules v{version}"))
            return version
        self.rows.append(_row(what, "ops", r))
        return None

    def _read_your_write(self, oid: str, who: str, position: str | None, timeout: float = 30.0) -> None:
        """GET ``oid`` with the write's position (``Arbiter-Min-Position``) until the read model has it."""
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        if position:
            headers["Arbiter-Min-Position"] = position
        deadline = time.monotonic() + timeout
        while self.http.get(f"/objects/{oid}", headers=headers).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)

    def _garbage(self) -> Step:
        """Put bytes no codec can read straight onto the commands topic and find their rejection."""
        s = self.s
        p = Producer({"bootstrap.servers": s.kafka_bootstrap, "acks": "all", "partitioner": "murmur2_random"})
        placed: dict[str, int] = {}
        p.produce(s.topic_commands, key=self.doc.encode(), value=b"\xde\xad\xbe\xef not avro",
                  on_delivery=lambda err, m: placed.update(partition=m.partition(), offset=m.offset()) if not err else None)
        p.flush(30)
        c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": f"scenario-{uuid.uuid4().hex}",
                      "enable.auto.commit": False, "log_level": 0})
        c.assign([TopicPartition(s.topic_rejections, placed["partition"], 0)])
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for m in c.consume(200, timeout=0.5):
                    try:
                        rej = codec.decode_rejection(m.value())
                    except DecodeError:
                        continue
                    o = rej.original
                    if o is not None and o.topic == s.topic_commands and (o.partition, o.offset) == (
                            placed["partition"], placed["offset"]):
                        return Step("garbage bytes put on the topic", "-", "-", "rejected", rej.reason.value,
                                    f"kept {len(o.value or b'')} bytes @p{o.partition}/o{o.offset}")
        finally:
            c.close()
        return Step("garbage bytes put on the topic", "-", "-", "no decision within 60s", "", "")

    def read_model(self, wait_for: dict[str, int | None], timeout: float = 30.0) -> list[tuple[str, int, str]]:
        """GET each object until the read model shows the expected version (None: gone), then report it."""
        out = []
        for oid, version in wait_for.items():
            deadline = time.monotonic() + timeout
            while True:
                owner = "bob" if oid == self.notes else "alice"  # each object is read by its owner: only they may
                r = self.http.get(f"/objects/{oid}", headers={"Authorization": f"Bearer {self.tokens[owner]}"})
                etag = r.headers.get("ETag", "").strip('"')
                done = (r.status_code == 410) if version is None else (r.status_code == 200 and etag == str(version))
                if done or time.monotonic() > deadline:
                    body = r.text if r.status_code == 200 else r.json().get("code", r.text)
                    out.append((oid, r.status_code, f"ETag {etag} {body}" if etag else str(body)))
                    break
                time.sleep(0.3)
        return out


    def history(self, oid: str, who: str, timeout: float = 30.0) -> list[str]:
        """Return ``oid``'s history as ``who`` reads it, with ``who``'s own rejected commands: one line each."""
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        while True:
            r = self.http.get(f"/objects/{oid}/events", params={"include": "rejections", "limit": 100},
                              headers=headers)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        if r.status_code != 200:
            return [f"HTTP {r.status_code} {r.text[:200]}"]
        page = r.json()
        lines = []
        for e in page["events"]:
            what = e.get("patch") or e.get("document") or e.get("editor") or e.get("reader") or ""
            lines.append(f"v{e['version']:<3} {e['type']:<16} {e['principal']:<8} "
                         f"{json.dumps(what, separators=(',', ':')) if what else ''}")
        for rej in page.get("rejections") or []:
            lines.append(f"     {'rejected':<16} {who:<8} {rej['reason']} at version {rej['version']}")
        return lines


class LiveChanges:
    """Follow one object's change feed (``GET /objects/{id}/changes``) in a thread until it reaches a version."""

    def __init__(self, base_url: httpx.URL, oid: str, token: str, until_version: int) -> None:
        self.url, self.oid, self.token, self.until = str(base_url).rstrip("/"), oid, token, until_version
        self.lines: list[str] = []
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="scenario-changes", daemon=True)
        self._t0 = 0.0

    def start(self, timeout: float = 30.0) -> LiveChanges:
        """Open the stream and return once the API says it is live (so the next write is seen live)."""
        self._thread.start()
        self._subscribed.wait(timeout)
        self._t0 = time.monotonic()
        return self

    def result(self, timeout: float = 60.0) -> list[str]:
        self._thread.join(timeout)
        return self.lines or ["no change arrived"]

    def _follow(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
        try:
            with httpx.Client(timeout=httpx.Timeout(10.0, read=60.0)) as client, client.stream(
                    "GET", f"{self.url}/objects/{self.oid}/changes", headers=headers) as r:
                if r.status_code != 200:
                    self.lines.append(f"HTTP {r.status_code} {r.read()[:200]!r}")
                    return
                event, data = "", ""
                for line in r.iter_lines():
                    if line.startswith(": live"):
                        self._subscribed.set()
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data = line[5:].strip()
                    elif not line and event:
                        if self._record(event, data):
                            return
                        event, data = "", ""
        except httpx.HTTPError as e:
            self.lines.append(f"stream failed: {e!r}")
        finally:
            self._subscribed.set()

    def _record(self, event: str, data: str) -> bool:
        """Note one frame; return True once the stream has shown what the scenario waits for."""
        body = json.loads(data) if data else {}
        if event != "change":
            self.lines.append(f"{event} {data}")
            return True
        what = body.get("patch") or body.get("document") or body.get("editor") or body.get("reader") or ""
        after = (time.monotonic() - self._t0) * 1000
        self.lines.append(f"change v{body.get('version')} {body.get('type')} by {body.get('principal')} "
                          f"{json.dumps(what, separators=(',', ':'))}  ({after:.0f} ms after the update was sent)")
        return int(body.get("version") or 0) >= self.until


ORDERS = Path(__file__).parents[2] / "docs" / "examples" / "rules" / "orders.yaml"
LIMIT, RAISED = ("next.amount > 10000", "approval over 10,000"), ("next.amount > 50000", "approval over 50,000")


def raised_limit(orders: str) -> str:
    """Return the order example with its finance approval limit raised from 10,000 to 50,000."""
    for old, new in zip(LIMIT, RAISED, strict=True):
        if old not in orders:
            raise ValueError(f"{ORDERS} no longer holds {old!r}: update the scenario's LIMIT")
        orders = orders.replace(old, new)
    return orders


def _row(what: str, who: str, r: httpx.Response) -> Step:
    etag = r.headers.get("ETag", "").strip('"')
    rules = r.headers.get("Arbiter-Rules-Version")  # a decision under the team's rules names their version
    if rules is not None:
        etag = f"{etag} (rules v{rules})" if etag else f"rules v{rules}"
    if r.status_code in (200, 201, 204):
        return Step(what, who, r.status_code, "accepted", "", etag)
    if r.status_code == 202:
        return Step(what, who, 202, "queued (no decision in time)", "", "")
    try:
        body = r.json()
    except ValueError:
        body = {}
    version = body.get("current_version")
    code = str(body.get("code", ""))
    outcome = "rejected" if code in ReasonCode.__members__ else "refused by API"
    shown = "" if version is None else str(version)
    if rules is not None:
        shown = f"{shown} (rules v{rules})" if shown else f"rules v{rules}"
    note = f"{body['rule']}: {body.get('rule_message')}" if body.get("rule") else ""
    return Step(what, who, r.status_code, outcome, code, shown, note)


#: Where a row's note starts: under the row, indented, so the table stays within a terminal's width.
NOTE_INDENT = " " * 6


def table(rows: list[Step]) -> str:
    """Render the steps as a fixed-width table, each row's note (a refusing rule's name and message) under it."""
    head = Step("step", "who", "HTTP", "outcome", "reason", "version")
    cols = [max(len(str(getattr(r, f))) for r in [head, *rows]) for f in ("what", "principal", "http", "outcome",
                                                                           "reason", "version")]
    lines = []
    for i, r in enumerate([head, *rows]):
        vals = [r.what, r.principal, r.http, r.outcome, r.reason, r.version]
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(vals, cols, strict=True)).rstrip())
        if r.note:
            lines.append(NOTE_INDENT + "-> " + r.note)
        if i == 0:
            lines.append("  ".join("-" * w for w in cols))
    return "\n".join(lines)
