"""Hostile and unlucky clients against the real broker (issue 25, issue 24 item 5): a batch whose items are too
large for the API's check or the producer, and what every item is answered."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from app.api.writes.producer import CommandProducer
from app.errors import BrokerUnavailable
from app.local.kafka_broker import free_port
from app.settings import Settings
from app.topics import ensure_topics
from schemas import codec
from tests.integration.test_api_support import api_client, auth, consume_all, is_problem, live_pipeline

pytestmark = pytest.mark.integration


def test_a_batch_answers_every_item_even_those_too_large_for_the_check_or_the_producer(settings: Settings) -> None:
    """An item over the document limit is 413 (as POST /objects answers it) and not produced; an item the producer
    refuses at once (over its message.max.bytes, here lowered below the document limit) is 413 too, after earlier
    items were queued; the others are 202 and on the topic. The answer is a problem with one result per item."""
    s = settings.model_copy(update={"max_message_bytes": 64 * 1024, "kafka_config": {"message.max.bytes": "30000"}})
    ensure_topics(s)
    items = [
        {"kind": "create", "object_id": "small-1", "document": {"x": 1}},
        {"kind": "create", "object_id": "producer-refuses", "document": {"x": "p" * 40_000}},
        {"kind": "create", "object_id": "over-the-limit", "document": {"x": "o" * 70_000}},
        {"kind": "update", "object_id": "small-1", "patch": {"x": 2}},
    ]
    with api_client(s) as client:
        r = client.post("/commands:batch", json={"commands": items}, headers=auth(s, "alice"))
        body = is_problem(r, 413, "TOO_LARGE")
        results = body["results"]
        assert [x["object_id"] for x in results] == [it["object_id"] for it in items]
        assert [x["status"] for x in results] == [202, 413, 413, 202], results
        assert [x.get("code") for x in results] == [None, "TOO_LARGE", "TOO_LARGE", None]
        # the single route agrees on the item over the limit
        single = client.post("/objects", json={"id": "over-the-limit", "document": items[2]["document"]},
                             headers=auth(s, "alice"))
        is_problem(single, 413)  # BODY_TOO_LARGE: its body is over one document + 1 KiB
    on_topic = [codec.decode_command(m.value()) for m in consume_all(s, s.topic_commands, 2)]
    assert sorted(c.command_id for c in on_topic) == sorted(x["command_id"] for x in results if x["status"] == 202)


def test_after_a_fatal_producer_error_every_waiting_request_is_answered(settings: Settings) -> None:
    """Issue 24 item 5: records queued when the idempotent producer hit a fatal error were purged, but their reports
    were served only by a flush(0) at the next produce, and the old producer was never polled again: the requests
    waited out produce_timeout_s and were told "no acknowledgement". Now each is answered from its purged report.

    The broker address is one nobody listens on, so the records stay queued in librdkafka; the fatal error is the
    one librdkafka reports through error_cb, handed to the producer's own callback."""
    s = settings.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{free_port()}", "produce_timeout_s": 60.0})

    async def scenario() -> list[object]:
        producer = CommandProducer(s)
        single = asyncio.ensure_future(producer.send("a", b"one"))
        many = asyncio.ensure_future(producer.send_many([("b", b"two"), ("c", b"three")]))
        await asyncio.sleep(0.2)  # queued, not deliverable
        assert not single.done() and not many.done()
        producer._on_error(KafkaError(KafkaError._FATAL, "injected fatal error", fatal=True))
        try:
            one = await asyncio.wait_for(single, 30)
        except BrokerUnavailable as e:
            one = e
        out = [one, *await asyncio.wait_for(many, 30)]
        assert not producer._retired, "the retired producer still holds unreported records"
        producer.close(0)
        return out

    results = asyncio.run(scenario())
    assert all(isinstance(r, BrokerUnavailable) and "Purged" in r.message for r in results), results


class _FailsOnce:
    """The outcome consumer's librdkafka consumer, whose next ``consume`` raises once (an injected failure)."""

    def __init__(self, consumer: Any) -> None:  # noqa: ANN401
        self.consumer, self.failed = consumer, False

    def consume(self, *args: Any) -> Any:  # noqa: ANN401
        if not self.failed:
            self.failed = True
            raise RuntimeError("injected failure of the outcome consumer")
        return self.consumer.consume(*args)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401
        return getattr(self.consumer, name)


def test_the_outcome_consumer_survives_a_failure_and_healthz_shows_it(spark, settings: Settings) -> None:  # noqa: ANN001
    """Issue 24 item 5: an exception in the outcome consumer's loop killed its thread for good, and every later
    Prefer: wait timed out into a 202. Now the loop restarts, the wait is answered, and /healthz counts the failure."""
    s = settings.model_copy(update={"wait_max_s": 60.0})
    with live_pipeline(spark, s), api_client(s) as client:
        oc = client.app.state.outcome_consumer  # type: ignore[attr-defined]
        failing = _FailsOnce(oc._consumer)
        oc._consumer = failing
        deadline = time.monotonic() + 10
        while not failing.failed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert failing.failed
        r = client.post("/objects", json={"id": "after-failure", "document": {}},
                        headers={**auth(s, "alice"), "Prefer": "wait=60"})
        assert r.status_code == 201 and r.headers["etag"] == '"1"', r.text
        health = client.get("/healthz").json()
        assert health["ok"] and health["outcomes_consumer"], health
        assert health["outcomes_consumer_restarts"] == 1 and "injected" in health["outcomes_consumer_error"]
