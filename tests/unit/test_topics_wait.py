"""Topic setup's waits (app/topics.py): a partition without a leader yet is retried, anything else is not."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from app import topics

pytestmark = pytest.mark.unit


class _Consumer:
    """Answers ``get_watermark_offsets`` with the queued errors first, then (3, 10)."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 10


def test_a_partition_without_a_leader_yet_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics.time, "sleep", lambda _s: None)
    consumer = _Consumer(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert topics._watermarks(consumer, TopicPartition("t", 0)) == (3, 10)
    assert consumer.calls == 3


def test_other_errors_are_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics.time, "sleep", lambda _s: None)
    consumer = _Consumer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        topics._watermarks(consumer, TopicPartition("t", 0))
    assert consumer.calls == 1


def test_the_retry_ends_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 7))
    monkeypatch.setattr(topics.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(topics.time, "sleep", lambda _s: None)
    consumer = _Consumer(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException):
        topics._watermarks(consumer, TopicPartition("t", 0), timeout_s=30)
    assert 2 <= consumer.calls <= 10
