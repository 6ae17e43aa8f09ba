"""Broker stopped: writes answer 503 with Retry-After, and nothing is lost or doubled once it is back.

Runs on ``own_broker`` (tests/integration/conftest.py: a broker apart from the session's, started once for the tests
that stop it) so stopping it does not disturb the session broker.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from app.local.kafka_broker import LocalBroker
from app.settings import Settings
from app.topics import ensure_topics
from commands import Event, ObjectState, decide
from schemas import codec
from tests.integration.test_api_support import api_client, auth, consume_all

pytestmark = pytest.mark.integration


def test_writes_answer_503_while_the_broker_is_down_and_a_retry_applies_once(
        own_broker: LocalBroker, base_settings: Settings, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    s = base_settings.model_copy(update={
        "kafka_bootstrap": own_broker.bootstrap, "partitions": 2, "topic_commands": f"commands-{tag}",
        "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}", "var_dir": tmp_path,
        "produce_timeout_s": 2.0, "retry_after_s": 3})
    ensure_topics(s)
    h = auth(s, "alice")
    with api_client(s) as client:
        first = client.post("/objects", json={"id": "obj", "document": {"n": 0}}, headers={**h, "Idempotency-Key": "c0"})
        assert first.status_code == 202, first.text

        own_broker.stop()
        start = time.monotonic()
        down = client.patch("/objects/obj", json={"n": 1}, headers={**h, "Idempotency-Key": "c1"})
        assert down.status_code == 503, down.text
        assert time.monotonic() - start < s.produce_timeout_s + 3
        assert down.headers["retry-after"] == "3"
        assert down.headers["content-type"].startswith("application/problem+json")
        assert down.json()["code"] == "BROKER_UNAVAILABLE" and down.json()["command_id"] == "c1"
        batch = client.post("/commands:batch", json={"commands": [
            {"kind": "grant_editor", "object_id": "obj", "editor": "bob", "idempotency_key": "c2"}]}, headers=h)
        assert batch.status_code == 503 and batch.headers["retry-after"] == "3"
        assert [r["status"] for r in batch.json()["results"]] == [503]
        assert client.get("/healthz").json()["broker"] is False

        own_broker.start(Settings())
        # the client retries with the same Idempotency-Key until the broker takes it
        deadline = time.monotonic() + 90
        while True:
            retry = client.patch("/objects/obj", json={"n": 1}, headers={**h, "Idempotency-Key": "c1"})
            if retry.status_code == 202 or time.monotonic() > deadline:
                break
            assert retry.status_code == 503, retry.text
            time.sleep(float(retry.headers["retry-after"]) / 3)
        assert retry.status_code == 202, retry.text
        again = client.patch("/objects/obj", json={"n": 1}, headers={**h, "Idempotency-Key": "c1"})  # an eager client
        assert again.status_code == 202

    records = consume_all(s, s.topic_commands, 3)
    cmds = [codec.decode_command(m.value()) for m in sorted(records, key=lambda m: (m.partition(), m.offset()))]
    assert {c.command_id for c in cmds} == {"c0", "c1"}, "c2 was refused (503) and never retried"
    # what the validator will make of the topic: the one decision function, folded in topic order
    state: ObjectState | None = None
    events = []
    for c in cmds:
        d = decide(state, c)
        state = d.state
        if isinstance(d.outcome, Event):
            events.append(d.outcome)
    assert [(e.command_id, e.version) for e in events] == [("c0", 1), ("c1", 2)]  # c1 applied exactly once
