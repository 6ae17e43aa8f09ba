"""The change feed over real HTTP (uvicorn, httpx streaming) behind the real validator, DB and audit projections:
live events, a disconnect and resume under load with every event exactly once, the outsider's 404 and silence,
access-revoked (on fresh and resumed streams), the per-principal limit, what a resumed stream may replay, ids bound
to their principal, a deleted object's end (204) and retention (410)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from app.api.main import create_app
from app.settings import Settings
from tests.integration.test_api_support import (
    RunningArbiter,
    audit_projection_running,
    auth,
    db_projection_running,
    decided,
    is_problem,
    served,
    validator_running,
)

pytestmark = pytest.mark.integration
WAIT = {"Prefer": "wait=30"}
MERGE = {"Content-Type": "application/merge-patch+json"}


class Stream:
    """A client of one SSE route on a thread of its own: its frames as (event, id, data), until it ends or ``stop``."""

    def __init__(self, url: str, path: str, headers: dict[str, str], stop_after: int | None = None) -> None:
        self.frames: list[tuple[str, str | None, Any]] = []
        self.comments: list[str] = []
        self.status: int | None = None
        self.ended = threading.Event()
        self._stop_after = stop_after
        self._stop = False
        self._thread = threading.Thread(target=self._run, args=(url, path, headers), daemon=True)
        self._thread.start()

    def _run(self, url: str, path: str, headers: dict[str, str]) -> None:
        try:
            with httpx.Client(base_url=url, timeout=httpx.Timeout(60, read=120)) as client, \
                    client.stream("GET", path, headers=headers) as r:
                self.status = r.status_code
                kind, sid, data = "message", None, ""
                for line in r.iter_lines():
                    if line.startswith(":"):
                        self.comments.append(line)
                    elif line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("id: "):
                        sid = line[4:]
                    elif line.startswith("data: "):
                        data = line[6:]
                    elif line == "" and data:  # a blank line ends a frame; after a comment there is none
                        self.frames.append((kind, sid, json.loads(data)))
                        kind, sid, data = "message", None, ""
                        if self._stop or (self._stop_after is not None and len(self.frames) >= self._stop_after):
                            return  # leaving mid-stream: the connection is closed here
                    if self._stop:
                        return
        finally:
            self.ended.set()

    def stop(self) -> None:
        self._stop = True

    def changes(self) -> list[tuple[str, int]]:
        return [(d["object_id"], d["version"]) for k, _, d in self.frames if k == "change"]

    def last_id(self) -> str:
        return next(sid for _, sid, _ in reversed(self.frames) if sid is not None)


def until(condition: Any, what: str, timeout: float = 60.0) -> None:  # noqa: ANN401 - a callable
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_changes_live_resume_access_and_limits(arbiter: RunningArbiter) -> None:
    """Alice's /changes stream leaves after 15 frames while 60 patches and 10 creates flow, and resumes with its
    Last-Event-ID: over both connections she sees every one of those events exactly once. An object stream
    resumed from its 10th id gets exactly the rest. Eve, an outsider, gets the unknown id's 404 byte for byte on
    /objects/{id}/changes and no event of alice's on /changes (her first is the grant alice then gives her). Bob,
    a reader, gets access-revoked when alice revokes him, and his stream ends. A principal's third stream is 429.

    On the shared running Arbiter's validator and DB projection (objects and principals carry the test's tag), with
    an audit projection and an API of its own (its stream limit and heartbeat; its own count of open streams)."""
    s = arbiter.settings.model_copy(update={"changes_max_per_principal": 3, "changes_heartbeat_s": 1.0})
    tag = arbiter.tag
    doc, dox, bob_name, eve_name = (f"{x}-{tag}" for x in ("doc", "dox", "bob", "eve"))
    app = create_app(s)
    with audit_projection_running(s), served(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        alice, bob, eve = auth(s, f"alice-{tag}"), auth(s, bob_name), auth(s, eve_name)
        paths = c.get("/openapi.json").json()["paths"]
        for route in ("/changes", "/objects/{object_id}/changes"):
            spec = paths[route]["get"]
            assert "text/event-stream" in spec["responses"]["200"]["content"]
            assert spec["security"] == [{"bearer": []}, {"ticket": []}]  # a bearer token, or a browser's ticket
            assert {"400", "401", "410", "429", "503"} <= set(spec["responses"]), spec["responses"].keys()
        operator = auth(s, "operator")

        def open_streams() -> int:
            return int(c.get("/status.json", headers=operator).json()["change_subscribers"])
        decided(c.post("/objects", json={"id": doc, "document": {"n": 0}}, headers={**alice, **WAIT}), 201, '"1"')
        decided(c.put(f"/objects/{doc}/readers/{bob_name}", headers={**alice, **WAIT}), 200, '"2"')
        until(lambda: c.get(f"/objects/{doc}", headers=bob).status_code == 200, "the read model to hold doc")

        hidden = c.get(f"/objects/{doc}/changes", headers=eve)
        unknown = c.get(f"/objects/{dox}/changes", headers=eve)
        plain = c.get(f"/objects/{dox}", headers=eve)
        is_problem(hidden, 404, "NOT_FOUND")
        assert hidden.content == unknown.content.replace(dox.encode(), doc.encode())
        # and GET /objects/{id}'s own 404, but for the problem's instance (the path asked)
        assert hidden.content == plain.content.replace(dox.encode(), doc.encode()).replace(
            f'/objects/{doc}"'.encode(), f'/objects/{doc}/changes"'.encode())
        assert {**hidden.headers, "date": ""} == {**unknown.headers, "date": ""}

        everything = Stream(url, "/changes", alice, stop_after=15)
        one = Stream(url, f"/objects/{doc}/changes", alice)
        reader = Stream(url, f"/objects/{doc}/changes", bob)
        outsider = Stream(url, "/changes", eve)
        extra = Stream(url, "/changes", alice)
        until(lambda: all(x.comments for x in (everything, one, reader, outsider, extra)), "five streams to go live")
        assert (everything.status, one.status, reader.status, outsider.status, extra.status) == (200,) * 5
        is_problem(c.get("/changes", headers=alice), 429, "TOO_MANY_SUBSCRIPTIONS")  # her fourth
        assert open_streams() == 5
        extra.stop()
        until(lambda: open_streams() == 4, "the server to see alice's extra stream leave")

        for i in range(60):  # answered 202 at once: the writes keep flowing while alice's stream leaves
            assert c.patch(f"/objects/{doc}", json={"n": i + 1}, headers={**alice, **MERGE}).status_code == 202
            if i % 6 == 0:
                assert c.post("/objects", json={"id": f"other-{i}-{tag}", "document": {}}, headers=alice).status_code == 202
        assert everything.ended.wait(60), "alice's first /changes stream did not get its 15 frames"
        until(lambda: open_streams() == 3, "the server to see alice's first stream leave")
        resumed = Stream(url, "/changes", {**alice, "Last-Event-ID": everything.last_id()})
        wanted = {(doc, v) for v in range(3, 63)} | {(f"other-{i}-{tag}", 1) for i in range(0, 60, 6)}
        until(lambda: set(everything.changes() + resumed.changes()) >= wanted, "every event over both connections")
        seen = everything.changes() + resumed.changes()
        assert len(seen) == len(set(seen)) == len(wanted) and set(seen) == wanted  # once each: no gap, no duplicate
        assert [v for o, v in seen if o == doc] == list(range(3, 63))  # in order, across the reconnect

        until(lambda: (doc, 62) in one.changes(), "alice's object stream to reach version 62")
        assert one.changes() == [(doc, v) for v in range(3, 63)]
        again = Stream(url, f"/objects/{doc}/changes", {**alice, "Last-Event-ID": one.frames[9][1]}, stop_after=50)
        assert again.ended.wait(60)
        assert again.changes() == [(doc, v) for v in range(13, 63)]

        decided(c.delete(f"/objects/{doc}/readers/{bob_name}", headers={**alice, **WAIT}), 200, '"63"')
        assert reader.ended.wait(30), f"bob's stream did not end after access-revoked: {reader.frames[-3:]}"
        assert reader.changes() == [(doc, v) for v in range(3, 63)]
        assert reader.frames[-1][0] == "access-revoked" and reader.frames[-1][2] == {"object_id": doc, "version": 63}

        decided(c.put(f"/objects/other-0-{tag}/readers/{eve_name}", headers={**alice, **WAIT}), 200, '"2"')
        until(lambda: bool(outsider.frames), "eve's first frame")
        assert outsider.frames[0][0] == "change" and outsider.frames[0][2]["object_id"] == f"other-0-{tag}"
        assert outsider.frames[0][2]["type"] == "READER_GRANTED"
        assert not [d for _, _, d in outsider.frames if d["object_id"] == doc]

        until(lambda: open_streams() == 3, "the open streams to be alice's two and eve's")  # bob's was ended
        for x in (resumed, one, outsider):
            x.stop()
        until(lambda: open_streams() == 0, "every stream to be closed")


def test_resumed_streams_replay_only_what_may_be_read_now_and_a_deleted_object_lets_go(
        spark, settings: Settings) -> None:  # noqa: ANN001
    """Over uvicorn, behind the real validator, DB and audit projections:

    - bob, a reader, resumes /objects/doc/changes from his own id; alice's next patch reaches him, then her revoke
      arrives as ``access-revoked`` and his *resumed* stream ends;
    - bob resumes /changes from that old id of his reader window: nothing of the window (the patch), only the
      ``access-revoked``; eve sending bob's id, and a hand-made ``c1.AQAA``, are 400 INVALID_CURSOR;
    - alice's object stream ends with the DELETED change; resumed with that frame's id it is 204 (EventSource
      stops), resumed from the id before it it is that last frame and the end; without an id 410 DELETED;
    - once retention has deleted the topic's records, resuming from an id before them is 410 CHANGES_EXPIRED.

    A stack of its own: deleting the events topic's records would cut the shared one's history from under
    every projection that starts on it later."""
    s = settings.model_copy(update={"changes_heartbeat_s": 1.0})
    app = create_app(s)
    with validator_running(spark, s), db_projection_running(s), audit_projection_running(s), served(app) as url, \
            httpx.Client(base_url=url, timeout=60) as c:
        alice, bob, eve = auth(s, "alice"), auth(s, "bob"), auth(s, "eve")
        decided(c.post("/objects", json={"id": "doc", "document": {"n": 0}}, headers={**alice, **WAIT}), 201, '"1"')
        decided(c.put("/objects/doc/readers/bob", headers={**alice, **WAIT}), 200, '"2"')
        until(lambda: c.get("/objects/doc", headers=bob).status_code == 200, "the read model to hold doc")

        first = Stream(url, "/objects/doc/changes", bob, stop_after=1)
        until(lambda: bool(first.comments), "bob's stream to go live")
        decided(c.patch("/objects/doc", json={"n": 1}, headers={**alice, **MERGE, **WAIT}), 200, '"3"')
        assert first.ended.wait(30) and first.changes() == [("doc", 3)]
        window = first.last_id()  # bob's id from inside his reader window

        again = Stream(url, "/objects/doc/changes", {**bob, "Last-Event-ID": window})
        until(lambda: ": live" in again.comments, "bob's resumed stream to go live")
        decided(c.patch("/objects/doc", json={"n": 2, "secret": "s"}, headers={**alice, **MERGE, **WAIT}), 200,
                '"4"')
        decided(c.delete("/objects/doc/readers/bob", headers={**alice, **WAIT}), 200, '"5"')
        assert again.ended.wait(30), f"bob's resumed stream did not end after access-revoked: {again.frames}"
        assert [(k, d["version"]) for k, _, d in again.frames] == [("change", 4), ("access-revoked", 5)]
        until(lambda: c.get("/objects/doc", headers=bob).status_code == 404, "the read model to drop bob")

        replay = Stream(url, "/changes", {**bob, "Last-Event-ID": window})
        until(lambda: ": live" in replay.comments, "bob's /changes to catch up")
        replay.stop()
        assert [(k, d["object_id"], d["version"]) for k, _, d in replay.frames] == [("access-revoked", "doc", 5)]
        for forged in (window, "c1.AQAA"):
            is_problem(c.get("/changes", headers={**eve, "Last-Event-ID": forged}), 400, "INVALID_CURSOR")
        is_problem(c.get("/objects/doc/changes", headers={**bob, "Last-Event-ID": "c1.AQAA"}), 400, "INVALID_CURSOR")

        own = Stream(url, "/objects/doc/changes", alice)
        until(lambda: bool(own.comments), "alice's stream to go live")
        decided(c.patch("/objects/doc", json={"n": 3}, headers={**alice, **MERGE, **WAIT}), 200, '"6"')
        decided(c.delete("/objects/doc", headers={**alice, **WAIT}), 204, '"7"')
        assert own.ended.wait(30), f"alice's stream did not end with the object: {own.frames}"
        assert [(d["type"], d["version"]) for _, _, d in own.frames] == [("UPDATED", 6), ("DELETED", 7)]
        until(lambda: c.get("/objects/doc", headers=alice).status_code == 410, "the read model to hold the deletion")
        gone = c.get("/objects/doc/changes", headers={**alice, "Last-Event-ID": own.frames[-1][1]}, timeout=10)
        assert gone.status_code == 204 and gone.content == b"", (gone.status_code, gone.text[:200])
        last = Stream(url, "/objects/doc/changes", {**alice, "Last-Event-ID": own.frames[0][1]})
        assert last.ended.wait(30) and last.status == 200, f"the resumed deleted object's stream did not end: {last.frames}"
        assert [(d["type"], d["version"]) for _, _, d in last.frames] == [("DELETED", 7)]
        is_problem(c.get("/objects/doc/changes", headers=alice), 410, "DELETED")

        admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap})
        parts = [TopicPartition(s.topic_events, p) for p in range(s.partitions)]
        ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts})
        gone_to = [TopicPartition(tp.topic, tp.partition, f.result().offset) for tp, f in ends.items()]
        for f in admin.delete_records(gone_to).values():
            f.result(timeout=30)  # retention, as the broker applies it: the log now starts at the high watermark
        expired = c.get("/changes", headers={**alice, "Last-Event-ID": own.frames[0][1]}, timeout=10)
        is_problem(expired, 410, "CHANGES_EXPIRED")
