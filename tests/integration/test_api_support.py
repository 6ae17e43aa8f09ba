"""Helpers shared by the API's integration tests (no tests here): an in-process client and topic readers."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, Message, Producer
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():  # starlette 1.x nudges towards "httpx2"; httpx is what the project pins
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

from app.api.auth import issue_token
from app.api.deps import ReadModelPort
from app.api.main import create_app
from app.settings import Settings
from commands import Event, Rejection
from schemas import codec


def token(settings: Settings, principal: str) -> str:
    return issue_token(settings.auth_secret.get_secret_value(), principal, 3600)


def auth(settings: Settings, principal: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {token(settings, principal)}"}


@contextmanager
def api_client(settings: Settings, read_model: ReadModelPort | None = None) -> Iterator[TestClient]:
    """The app in-process, lifespan started (producer and outcomes consumer on the real broker)."""
    with TestClient(create_app(settings, read_model=read_model), raise_server_exceptions=True) as client:
        yield client


def consume_all(settings: Settings, topic: str, n: int, timeout: float = 20.0) -> list[Message]:
    """Read ``topic`` from the beginning until ``n`` records arrived (or ``timeout`` passed)."""
    import time

    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"t-{topic}-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.3):
                assert m.error() is None, m.error()
                out.append(m)
        # a short extra read: more than n records would be a bug the caller should see
        for m in c.consume(num_messages=1000, timeout=0.5):
            out.append(m)
    finally:
        c.close()
    return out


def produce_outcome(settings: Settings, outcome: Event | Rejection) -> None:
    """Write an outcome onto events/rejections as the validator would: codec bytes keyed by object id."""
    topic = settings.topic_events if isinstance(outcome, Event) else settings.topic_rejections
    p = Producer({"bootstrap.servers": settings.kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all"})
    key: Any = outcome.object_id.encode() if outcome.object_id else None
    p.produce(topic, codec.encode_outcome(outcome), key)
    assert p.flush(10) == 0
