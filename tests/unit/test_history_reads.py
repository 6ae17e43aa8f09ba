"""History reads (issue 35, untested promises): ``GET /objects/{id}?version=N`` and the history answer the roles
the object has *now* (a reader revoked since version N gets exactly the 404 of an unknown id, as does anyone never
granted), and a history page stops at ``PAGE_BYTES``. The RocksDB read model written by the DB projection's own
code; the app without its lifespan (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.read_models import read_model_root
from app.settings import Settings
from commands import CreateObject, Event, GrantReader, RevokeReader, UpdateObject, decide
from commands.command import Command
from projections.db import DbProjection, ReadModel
from projections.db.store import ReadModelStore
from projections.runner import Item, Record
from schemas import codec
from tests.unit.erasure_support import api, auth

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _project(s: Settings, object_id: str, commands: list[Command]) -> None:
    state, items = None, []
    for n, c in enumerate(commands):
        d = decide(state, c)
        assert isinstance(d.outcome, Event), d.outcome
        state = d.state
        items.append(Item(Record(s.topic_events, 0, n, object_id.encode(), codec.encode_event(d.outcome), 0),
                          d.outcome))
    projection = DbProjection(ReadModelStore.open_current(read_model_root(s)))
    projection.apply(items)
    projection.close()


def test_a_revoked_reader_and_an_outsider_get_the_404_of_an_unknown_id_for_every_past_version(tmp_path: Path) -> None:
    s = Settings(var_dir=tmp_path / "var")
    t = [T0 + timedelta(seconds=n) for n in range(4)]
    _project(s, "doc", [CreateObject("c1", "doc", "alice", t[0], document='{"v": 1}'),
                        GrantReader("c2", "doc", "alice", t[1], reader="carol"),
                        UpdateObject("c3", "doc", "alice", t[2], patch='{"v": 3}'),
                        RevokeReader("c4", "doc", "alice", t[3], reader="carol")])
    client = api(s, ReadModel(read_model_root(s), refresh_s=0))
    for version, doc in ((1, {"v": 1}), (2, {"v": 1}), (3, {"v": 3}), (4, {"v": 3})):
        r = client.get(f"/objects/doc?version={version}", headers=auth(s, "alice"))
        assert (r.status_code, r.json()) == (200, doc), version
    for who in ("carol", "dave"):  # carol could read versions 2 and 3 when they were current; dave never could
        for path in [f"/objects/{{}}?version={v}" for v in (1, 2, 3, 4)] + ["/objects/{}/events", "/objects/{}"]:
            hidden = client.get(path.format("doc"), headers=auth(s, who))
            unknown = client.get(path.format("dox"), headers=auth(s, who))
            assert hidden.status_code == 404 and hidden.json()["code"] == "NOT_FOUND", (who, path, hidden.text)
            assert hidden.content == unknown.content.replace(b"dox", b"doc") and "etag" not in hidden.headers


def test_a_history_page_stops_at_page_bytes_of_entries_after_its_first_event() -> None:
    """Entries of exactly ``PAGE_BYTES`` together make one page; one byte more and the page stops before the second
    (its ``next_after_version`` says where to go on); a first entry over the bound is still served, alone."""
    import json

    from app.api.history import PAGE_BYTES, event_page, page_events
    from projections.db.history import HistoryEntry, entry_bytes

    def entries(first: int, second: int) -> list[HistoryEntry]:
        """Two entries, of ``first`` and ``second`` bytes (padding a document and a patch)."""
        out, state = [], None
        for n, (size, make) in enumerate(((first, lambda pad: CreateObject("c1", "doc", "alice", T0, document=pad)),
                                          (second, lambda pad: UpdateObject("c2", "doc", "alice", T0, patch=pad)))):
            bare = len(entry_bytes(decide(state, make('{"p":""}')).outcome))
            d = decide(state, make(json.dumps({"p": "x" * (size - bare)}, separators=(",", ":"))))
            state = d.state
            out.append(HistoryEntry(n + 1, entry_bytes(d.outcome)))
            assert len(out[-1].data) == size
        return out

    half = PAGE_BYTES // 2
    events, more, before = page_events(entries(half, PAGE_BYTES - half), 100)
    assert [e["version"] for e in events] == [1, 2] and not more and before is None
    events, more, before = page_events(entries(half, PAGE_BYTES - half + 1), 100)
    assert [e["version"] for e in events] == [1] and more and before == 1
    assert json.loads(event_page("doc", events, more, 0, None))["next_after_version"] == 1
    events, more, _ = page_events(entries(PAGE_BYTES + 1, 10_000), 100)
    assert [e["version"] for e in events] == [1] and more
