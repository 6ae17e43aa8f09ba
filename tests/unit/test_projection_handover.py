"""DB projection instances sharing one read model (``arbiter project db --group``): a partition that comes back to
an instance after another held it is folded onto what the store holds, not onto the instance's stale cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from commands import CreateObject, Event, UpdateObject, decide
from projections.db.projection import DbProjection
from projections.db.store import ReadModelStore
from projections.runner import Item, Record

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _events() -> list[Event]:
    cmds = [CreateObject("c0", "o1", "alice", T0, document='{"n": 0}')]
    cmds += [UpdateObject(f"c{i}", "o1", "alice", T0 + timedelta(seconds=i), patch=f'{{"n": {i}}}') for i in (1, 2)]
    state, out = None, []
    for c in cmds:
        d = decide(state, c)
        assert isinstance(d.outcome, Event)
        state = d.state
        out.append(d.outcome)
    return out


def _item(ev: Event, offset: int) -> Item:
    return Item(Record("events", 0, offset, ev.object_id.encode(), b"", 0), ev)


def test_a_partition_handed_back_is_folded_onto_the_store_not_the_cache(tmp_path: Path) -> None:
    store = ReadModelStore(tmp_path / "gen-1", sync=False)
    first, second = DbProjection(store), DbProjection(store)
    v1, v2, v3 = _events()
    first.apply([_item(v1, 0)])          # the first instance holds partition 0 and caches o1 at version 1
    second.apply([_item(v2, 1)])         # the group moved it: the second instance applies version 2
    first.handover()                     # ... and moved it back
    first.apply([_item(v3, 2)])
    view = store.get("o1")
    assert view is not None and view.version == 3
    assert first.counts.gaps == 0 and store.gaps() == {}
    assert store.offsets()[("events", 0)] == 3


def test_group_mode_is_refused_on_the_rocksdb_read_model(caplog: pytest.LogCaptureFixture) -> None:
    from app.cli import main
    from app.settings import get_settings

    get_settings.cache_clear()  # the defaults: ARBITER_* is stripped by tests/conftest.py, so rocksdb
    assert main(["project", "db", "--group"]) == 2
    assert "--group needs the shared PostgreSQL read model" in caplog.text
