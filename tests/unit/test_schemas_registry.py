"""The optional Confluent-compatible registry client against a tiny in-process fake registry."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from commands import DeleteObject
from schemas import codec, registry

pytestmark = pytest.mark.unit


class FakeRegistry(ThreadingHTTPServer):
    """Subjects and ids in memory; ids start at 1 like Confluent's and are reused for equal schemas."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}


class Handler(BaseHTTPRequestHandler):
    server: FakeRegistry

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def answer(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", registry.CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        subject = self.path.split("/")[2]
        schema = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["schema"]
        known = [i for i, s in self.server.schemas.items() if s == schema]
        schema_id = known[0] if known else len(self.server.schemas) + 1
        self.server.schemas[schema_id] = schema
        self.server.subjects.setdefault(subject, []).append(schema_id)
        self.answer(200, {"id": schema_id})

    def do_GET(self) -> None:  # noqa: N802
        schema_id = int(self.path.rsplit("/", 1)[1])
        if schema_id in self.server.schemas:
            self.answer(200, {"schema": self.server.schemas[schema_id]})
        else:
            self.answer(404, {"error_code": 40403, "message": "Schema not found"})


@pytest.fixture
def fake_registry() -> Iterator[FakeRegistry]:
    server = FakeRegistry()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_without_url_the_repository_ids_serve() -> None:
    assert registry.from_env({}) is codec.default_codec


def test_with_url_schemas_are_registered_and_registry_ids_written(fake_registry: FakeRegistry) -> None:
    url = f"http://127.0.0.1:{fake_registry.server_address[1]}"
    c = registry.from_env({registry.ENV_URL: url})
    assert set(fake_registry.subjects) == {"arbiter.Command", "arbiter.Event", "arbiter.Rejection",
                                           "arbiter.ObjectState"}
    cmd = DeleteObject("c", "o", "p", datetime(2025, 1, 1, tzinfo=UTC))
    data = c.encode_command(cmd)
    assert codec.schema_id_of(data) == fake_registry.subjects["arbiter.Command"][-1]  # the newest version writes
    assert c.decode_command(data) == cmd
    assert registry.from_env({registry.ENV_URL: url}).encode_command(cmd) == data  # registration is idempotent


def test_unknown_id_is_fetched_from_the_registry(fake_registry: FakeRegistry) -> None:
    url = f"http://127.0.0.1:{fake_registry.server_address[1]}"
    writer = registry.from_env({registry.ENV_URL: url})
    cmd = DeleteObject("c", "o", "p", datetime(2025, 1, 1, tzinfo=UTC))
    data = writer.encode_command(cmd)
    reader = registry.Codec(registry.SchemaCatalog.repository(), fetch=registry.RegistryClient(url).schema)
    assert reader.decode_command(data) == cmd  # the registry's id is not in ids.json; fetched by id


def test_unreachable_registry_raises_registry_error() -> None:
    with pytest.raises(registry.RegistryError):
        registry.from_env({registry.ENV_URL: "http://127.0.0.1:9"})
