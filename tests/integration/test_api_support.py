"""Helpers shared by the API's integration tests (no tests here): an in-process client and topic readers."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, Consumer, Message, Producer, TopicPartition
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


@dataclass
class View:
    """What the API reads of an object (``projections.db.ObjectView``'s fields)."""

    document: dict[str, Any]
    version: int
    deleted: bool = False
    owner: str = "alice"
    editors: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()


@dataclass
class FakeReadModel:
    """Stands in for projections.db.ReadModel (same get contract) where a test needs exact control."""

    views: dict[str, View] = field(default_factory=dict)

    def get(self, object_id: str) -> View | None:
        return self.views.get(object_id)


def is_problem(r: Any, status: int, code: str | None = None) -> dict[str, Any]:  # noqa: ANN401 - an httpx Response
    """Assert ``r`` is an RFC 9457 problem with ``status`` (and ``code``); return its body."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["type"].startswith("urn:arbiter:problem:") and body["detail"]
    if code is not None:
        assert body["code"] == code, body
    return body


def produced_commands(settings: Settings, n: int, timeout: float = 10.0) -> list[Any]:
    """The commands the API produced so far (at least ``n`` awaited), decoded."""
    return [codec.decode_command(m.value()) for m in consume_all(settings, settings.topic_commands, n, timeout)]


def token(settings: Settings, principal: str) -> str:
    return issue_token(settings.auth_secret.get_secret_value(), principal, 3600)


def auth(settings: Settings, principal: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {token(settings, principal)}"}


@contextmanager
def api_client(settings: Settings, read_model: ReadModelPort | None = None) -> Iterator[TestClient]:
    """The app in-process, lifespan started (producer and outcomes consumer on the real broker)."""
    with TestClient(create_app(settings, read_model=read_model), raise_server_exceptions=True) as client:
        yield client


def consume_all(settings: Settings, topic: str, n: int, timeout: float = 20.0, window: float = 0.5) -> list[Message]:
    """Read ``topic`` from the beginning until ``n`` records arrived (or ``timeout`` passed), then ``window`` more.

    The ``window`` is what callers lean on to say "nothing (more) was produced", so it only starts once the
    consumer is proven assigned every partition and positioned at the high watermarks read after the wait:
    a window spent still joining or still fetching old records would prove nothing.
    """
    import time

    c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"t-{topic}-{time.monotonic_ns()}",
                  "enable.auto.commit": False})
    out: list[Message] = []

    def take(wait: float) -> None:
        for m in c.consume(num_messages=1000, timeout=wait):
            assert m.error() is None, m.error()
            out.append(m)

    try:
        partitions = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        assert sorted(tp.partition for tp in c.assignment()) == partitions, "the consumer is not assigned every partition"
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            take(0.3)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
        deadline = time.monotonic() + 20
        while True:
            read_to = {p: max([m.offset() + 1 for m in out if m.partition() == p], default=ends[p][0]) for p in partitions}
            behind = {p: (read_to[p], hi) for p, (_, hi) in ends.items() if read_to[p] < hi}
            if not behind:
                break
            assert time.monotonic() < deadline, f"not at the end offsets of {topic} (read to, high watermark): {behind}"
            take(0.2)
        positions = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in partitions])}
        assert all(positions[p] in (hi, OFFSET_INVALID) and (positions[p] == hi or hi == lo)
                   for p, (lo, hi) in ends.items()), f"positions {positions} are not the end offsets {ends}"
        # Positioned at the end: more than n records now would be a bug the caller should see.
        stop = time.monotonic() + window
        while time.monotonic() < stop:
            take(max(0.01, stop - time.monotonic()))
    finally:
        c.close()
    return out


def produce_outcome(settings: Settings, outcome: Event | Rejection) -> None:
    """Write an outcome onto events/rejections as the validator would: codec bytes keyed by object id."""
    topic = settings.topic_events if isinstance(outcome, Event) else settings.topic_rejections
    from app.limits import api_producer_config

    p = Producer({"bootstrap.servers": settings.kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all",
                  **api_producer_config(settings)})
    key: Any = outcome.object_id.encode() if outcome.object_id else None
    p.produce(topic, codec.encode_outcome(outcome), key)
    assert p.flush(10) == 0


@contextmanager
def domain_validator(settings: Settings) -> Iterator[list[Any]]:
    """Play the validator on a thread: every command on the commands topic through ``commands.decide`` (the real
    rules, state per object), each outcome onto events/rejections. Yields the outcomes written so far."""
    import threading

    from app.validator.fold import limits_for
    from commands import decide

    stop = threading.Event()
    written: list[Any] = []

    def run() -> None:
        c = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"t-validator-{id(written)}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([settings.topic_commands])
        states: dict[str, Any] = {}
        try:
            while not stop.is_set():
                for m in c.consume(num_messages=100, timeout=0.1):
                    if m.error() is not None:
                        continue
                    cmd = codec.decode_command(m.value())
                    d = decide(states.get(cmd.object_id), cmd, limits_for(settings))
                    states[cmd.object_id] = d.state
                    produce_outcome(settings, d.outcome)
                    written.append(d.outcome)
        finally:
            c.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield written
    finally:
        stop.set()
        thread.join(10)
