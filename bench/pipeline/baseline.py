"""The same-run baseline: how fast the stack's broker takes the same commands straight from a producer, no HTTP.

Same records as the clients send (half creates of fresh objects with a small document, half updates of them,
encoded with the same codec), the API's own producer configuration (acks=all, idempotent, murmur2), produced as
fast as the producer takes them to a topic of its own on the stack's broker (same partition count), so the
validator never sees them. The rate is records over first produce to the last acknowledgement.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Producer

from app.api.writes.producer import producer_config
from app.settings import Settings
from app.topics import ensure_topics
from commands import Command, CreateObject, UpdateObject
from schemas import codec


def records(n: int, tag: str, principal: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of ``n`` commands: create, update of it, create, update, ..."""
    now = datetime.now(UTC)
    out = []
    for i in range(n):
        oid = f"{tag}-{i - i % 2}"
        cmd: Command = (CreateObject(str(uuid.uuid4()), oid, principal, now, document=f'{{"title":"bench","n":{i}}}')
                        if i % 2 == 0 else UpdateObject(str(uuid.uuid4()), oid, principal, now, patch=f'{{"n":{i}}}'))
        out.append((oid.encode(), codec.encode_command(cmd)))
    return out


def raw_produce_rate(s: Settings, n: int) -> float:
    """Records/s for produce + every acknowledgement of ``n`` commands on the stack's broker, no HTTP."""
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    ensure_topics(s, [topic])
    data = records(n, f"raw-{topic}", "bench-raw")
    producer = Producer(producer_config(s))
    failed: list[str] = []

    def on_delivery(err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            failed.append(str(err))

    start = time.perf_counter()
    for key, value in data:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(60)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise SystemExit(f"raw produce baseline: {left} unacknowledged, {len(failed)} failed: {failed[:3]}")
    return n / elapsed
