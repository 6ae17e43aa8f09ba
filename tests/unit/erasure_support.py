"""An object to erase and one to keep, folded into a read model through the DB projection's own code, and what the
API must answer about them after ``arbiter erase`` (shared by the RocksDB unit test and the PostgreSQL one)."""

from __future__ import annotations

import hashlib
import json
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    from starlette.exceptions import StarletteDeprecationWarning

    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.identity import dev_token
from app.api.main import create_app
from app.settings import Settings
from commands import CreateObject, DeleteObject, Event, GrantReader, UpdateObject, decide
from commands.command import Command
from projections.runner import Item, Record
from schemas import codec

#: one high-entropy marker per erased value (RocksDB compresses SST blocks: a repeated text would not be found)
MARKS = [hashlib.sha256(b"mark %d" % n).hexdigest() for n in range(3)]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _events(commands: list[Command]) -> list[Event]:
    state, out = None, []
    for c in commands:
        d = decide(state, c)
        state = d.state
        assert isinstance(d.outcome, Event), d.outcome
        out.append(d.outcome)
    return out


def erasure_items(topic: str) -> list[Item]:
    """'gone' (created with a marked document, a reader granted, a marked patch, deleted) and 'kept' (created,
    updated), as the events topic's records (their values the events' Avro bytes, as the validator writes them)."""
    gone = _events([CreateObject("g1", "gone", "alice", T0, document=json.dumps({"address": MARKS[0]})),
                    GrantReader("g2", "gone", "alice", T0 + timedelta(seconds=1), reader="carol"),
                    UpdateObject("g3", "gone", "alice", T0 + timedelta(seconds=2), patch=json.dumps({"p": MARKS[1]})),
                    DeleteObject("g4", "gone", "alice", T0 + timedelta(seconds=3))])
    kept = _events([CreateObject("k1", "kept", "alice", T0, document=json.dumps({"a": 1})),
                    UpdateObject("k2", "kept", "alice", T0 + timedelta(seconds=4), patch=json.dumps({"b": 2}))])
    return [Item(Record(topic, 0, n, ev.object_id.encode(), codec.encode_event(ev), 0), ev)
            for n, ev in enumerate(gone + kept)]


def api(s: Settings, read_model: Any) -> TestClient:  # noqa: ANN401
    """The app over ``read_model`` without its lifespan: reads need only the read model and the token check."""
    return TestClient(create_app(s, read_model=read_model), raise_server_exceptions=True)


def auth(s: Settings, principal: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {dev_token(s, principal, ttl_s=60)}"}


def answers(client: TestClient, s: Settings, who: str = "alice") -> dict[str, tuple[int, str]]:
    """(status, code or body) of the reads about 'gone' and 'kept' that history serves, as ``who``."""
    h = auth(s, who)
    out = {}
    for path in ("/objects/gone", "/objects/gone/events", "/objects/gone?version=1", "/objects/gone?version=3",
                 "/objects/kept/events", "/objects/kept?version=1"):
        r = client.get(path, headers=h)
        body = r.json()
        out[path] = (r.status_code, body["code"] if r.status_code >= 400 else r.text)
    return out


def check_erased(client: TestClient, s: Settings) -> None:
    """After the erasure, 'gone''s history and past versions are 410 DELETED to its roles (404 to anyone else, as
    for an unknown id), and 'kept''s are served as before."""
    got = answers(client, s)
    assert {p: a[0] for p, a in got.items()} == {
        "/objects/gone": 410, "/objects/gone/events": 410, "/objects/gone?version=1": 410,
        "/objects/gone?version=3": 410, "/objects/kept/events": 200, "/objects/kept?version=1": 200}, got
    assert {a[1] for p, a in got.items() if "gone" in p} == {"DELETED"}
    assert not any(m in a[1] for a in got.values() for m in MARKS)
    assert [e["version"] for e in json.loads(got["/objects/kept/events"][1])["events"]] == [1, 2]
    assert {a[0] for a in answers(client, s, who="mallory").values()} == {404}
