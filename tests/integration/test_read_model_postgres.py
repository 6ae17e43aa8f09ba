"""What only the PostgreSQL read model has: the local server, migrations, the swap lock, jsonb's limits, and the
docs' example queries (docs/concepts/projections.md, as printed), all against the real server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from pydantic import SecretStr

from app.local.postgres_server import LocalPostgres
from app.read_models import open_reader, open_writer, rebuild_target
from app.settings import Settings
from commands import Event, EventType
from projections.db import DbProjection, ObjectView
from projections.postgres import schema as pgschema
from projections.runner import Item, Record
from tests.conftest import read_model_on
from tests.docs_snippets import snippet

pytestmark = pytest.mark.integration



@pytest.fixture
def pg(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Settings]:
    with read_model_on("postgresql", settings, request) as s:
        yield s


def _dsn(s: Settings) -> str:
    assert s.postgres_dsn is not None
    return s.postgres_dsn.get_secret_value()


def test_the_local_server_listens_on_loopback_only_is_unprivileged_and_tracked_by_its_pid(postgres: LocalPostgres) -> None:
    with psycopg.connect(postgres.conninfo("postgres")) as conn:
        show = {name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                for name in ("listen_addresses", "unix_socket_directories", "data_directory", "port")}
    assert show["listen_addresses"] == "127.0.0.1"
    assert Path(show["unix_socket_directories"]).parent == postgres.directory
    assert Path(show["data_directory"]) == postgres.data and int(show["port"]) == postgres.port
    pid = postgres.running_pid()
    assert pid is not None and (postgres.data / "postmaster.pid").read_text().split()[0] == str(pid)
    assert os.stat(f"/proc/{pid}").st_uid != 0, "the server must not run as root"
    assert oct(postgres.password_file.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(psycopg.OperationalError):  # no password, no entry
        psycopg.connect(f"host=127.0.0.1 port={postgres.port} user=arbiter dbname=postgres password=wrong")


def test_migrations_are_versioned_applied_once_and_indexed(pg: Settings) -> None:
    writer = open_writer(pg)  # applies them at start
    writer.close()
    with psycopg.connect(_dsn(pg), autocommit=True) as conn:
        assert pgschema.migrate(conn, pg.postgres_schema) == [], "a second start applies nothing"
        versions = [r[0] for r in conn.execute("SELECT version FROM read_model.schema_version")]
        assert versions == [v for v, _ in pgschema.MIGRATIONS]
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes "
                                              "WHERE schemaname = 'read_model' AND tablename = 'documents'")}
        assert {"documents_pkey", "documents_owner", "documents_editors", "documents_readers"} == indexes


def _event(object_id: str, version: int, document: str, offset: int) -> Item:
    ev = Event(event_id=f"e{offset}", command_id=f"c{offset}", object_id=object_id, type=EventType.CREATED,
               version=version, principal="alice", occurred_at=datetime(2026, 1, 1, tzinfo=UTC), owner="alice",
               document=document)
    return Item(Record("events", 0, offset, object_id.encode(), b"", 0), ev)


def test_a_document_jsonb_cannot_hold_is_quarantined_and_reported_not_a_crash(pg: Settings) -> None:
    projection = DbProjection(open_writer(pg))
    projection.apply([_event("nul", 1, json.dumps({"t": "a\u0000b"}), 0),
                      _event("slash", 1, json.dumps({"t": "a\\u0000b"}), 1)])  # a backslash, then 'u0000': fine
    projection.close()
    assert projection.counts.invalid == 1 and projection.counts.applied == 1
    with open_reader(pg) as rm:
        nul = rm.get("nul")
        assert nul is not None and (nul.version, nul.owner, nul.quarantined, nul.document) == (1, "alice", True, {})
        assert rm.get("slash") is not None
        assert "U+0000" in json.loads(rm.gaps()["nul"])["detail"]
    writer = open_writer(pg)
    assert writer.offsets() == {("events", 0): 2}, "the batch (gap report included) committed with its offsets"
    writer.close()


def test_a_batch_written_across_a_swap_is_not_written_and_is_read_again(pg: Settings) -> None:
    live = DbProjection(open_writer(pg))
    live.apply([_event("a", 1, '{"n": 1}', 0)])
    target = rebuild_target(pg)
    fresh = target.fresh()
    fresh.write({"a": ObjectView({"n": 1}, 1, owner="alice")}, {("events", 0): 1}, {})
    fresh.close()
    target.swap_in()
    live.apply([_event("b", 1, '{"n": 2}', 1)])  # the store it writes to was swapped out: nothing lands
    with open_reader(pg) as rm:
        assert [oid for oid, _ in rm.views()] == ["a"]
    assert live.reseek() == {("events", 0): 1}, "the live projection moves to the new schema's offsets"
    live.apply([_event("b", 1, '{"n": 2}', 1)])
    live.close()
    with open_reader(pg) as rm:
        assert [oid for oid, _ in rm.views()] == ["a", "b"]




def test_the_docs_queries_run(pg: Settings) -> None:
    at = "2026-01-01T00:00:0{}+00:00"
    writer = open_writer(pg)
    writer.write({"plan": ObjectView({"title": "plan", "text": "x"}, 3, owner="alice", updated_at=at.format(1)),
                  "notes": ObjectView({"title": "notes"}, 2, owner="bob", updated_at=at.format(2), readers=("alice",)),
                  "gone": ObjectView({}, 4, deleted=True, owner="alice", updated_at=at.format(3)),
                  "bobs": ObjectView({"title": "secret"}, 1, owner="bob", updated_at=at.format(4))}, {}, {})
    writer.close()
    first, second = snippet("what alice may read"), snippet("documents per owner")  # as printed in the docs
    with psycopg.connect(_dsn(pg)) as conn:
        assert [(r[0], r[2]) for r in conn.execute(first)] == [("notes", "notes"), ("plan", "plan")]
        assert [tuple(r) for r in conn.execute(second)] == [("bob", 2, 0, 2), ("alice", 1, 1, 3)]


def test_copy_rows_round_trip_whatever_their_characters(pg: Settings) -> None:
    """COPY's text format and array literals escape tabs, newlines, backslashes, quotes, commas and braces."""
    odd = 'a\tb\\c"d\ne\r{f},g ü'
    views = {odd: ObjectView({"t\tk": 'x\\y"z\n', "n": [1, 2.5, None, True], "ü": {"deep": "\r"}}, 3, owner=odd,
                             editors=(odd, "NULL", ""), readers=("{}",), updated_at=None),
             "plain": ObjectView({}, 1, deleted=True, owner="alice", updated_at="2026-01-02T03:04:05.123456+00:00")}
    writer = open_writer(pg)
    writer.write(views, {}, {})
    writer.close()
    rm = open_reader(pg)
    try:
        assert dict(rm.views()) == views
        got = rm.get(odd)
        assert got is not None and (got.editors, got.readers, got.owner) == ((odd, "NULL", ""), ("{}",), odd)
        assert rm.get("plain").updated_at == "2026-01-02T03:04:05.123456+00:00"  # type: ignore[union-attr]
    finally:
        rm.close()


def test_a_database_that_cannot_be_reached_is_503_and_not_healthy(settings: Settings) -> None:
    from app.local.kafka_broker import free_port
    from tests.integration.test_api_support import api_client, auth, is_problem

    down = settings.model_copy(update={
        "read_model": "postgresql",
        "postgres_dsn": SecretStr(f"host=127.0.0.1 port={free_port()} user=x dbname=x connect_timeout=1")})
    with api_client(down) as client:  # the app opens its reader on a port nothing listens on
        is_problem(client.get("/objects/any", headers=auth(down, "alice")), 503, "READ_MODEL_UNAVAILABLE")
        assert client.get("/healthz").json()["read_model"] is False


def test_numbers_keys_and_duplicates_read_back_as_the_readme_says(pg: Settings) -> None:
    """commands.json_text accepts these: jsonb must hold them, as the same JSON values, spelt its own way."""
    text = '{"big": 1e16, "negzero": -0.0, "e": 1E2, "int": 123456789012345678901234567890, "bb": 1, "a": 2, "d": 1, "d": 2}'
    projection = DbProjection(open_writer(pg))
    projection.apply([_event("numbers", 1, text, 0)])
    projection.close()
    assert projection.counts.applied == 1
    with open_reader(pg) as rm:
        view = rm.get("numbers")
    assert view is not None and view.document == json.loads(text)  # equal values: 1e16 == 10**16, -0.0 == 0.0
    assert view.document["big"] == 10_000_000_000_000_000 and isinstance(view.document["big"], int)
    assert str(view.document["negzero"]) == "0.0" and view.document["e"] == 100.0 and view.document["d"] == 2
    assert list(view.document)[:2] == ["a", "d"], "jsonb orders keys shorter first"
