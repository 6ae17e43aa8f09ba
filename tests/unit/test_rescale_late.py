"""``LateRecords.sweep`` against a scripted broker: every record past a closed generation's end is rejected and parked
once, the first late record of each partition included, and nothing the closed generation's validator decided."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, TopicPartition

from app.rescale import generation, late
from app.rescale.generation import first, successor
from app.settings import Settings
from app.signing import SIGNATURE_HEADER
from app.validator import topic_io
from commands import CreateObject
from schemas import codec
from tests.unit.record_strategies import signature

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = Settings(topic_commands="cmds", partitions=4)  # type: ignore[arg-type]
G1 = successor(S, first(S), 6)
ENDS = {0: 3, 1: 0, 2: 5, 3: 2}  # per partition of "cmds", the first offset its validator did not decide
HIGH = {0: 6, 1: 2, 2: 5, 3: 3}  # the high watermarks: partition 2 got nothing late


class Message:
    def __init__(self, partition: int, offset: int) -> None:
        c = CreateObject(f"c{partition}.{offset}", f"o{partition}.{offset}", "alice", T0, document="{}")
        self._p, self._o = partition, offset
        self._k, self._v = c.object_id.encode(), codec.encode_command(c)

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "cmds"

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes:
        return self._v

    def headers(self) -> list[tuple[str, bytes]]:
        return [(SIGNATURE_HEADER, signature(self._k, self._v))]


class Broker:
    """The closed topic "cmds" (records 0..HIGH[p]-1 per partition), its late-records group, and what is produced."""

    def __init__(self) -> None:
        self.high = dict(HIGH)
        self.committed: dict[int, int] = {}
        self.produced: list[tuple[str, bytes | None, bytes | None, int]] = []

    def consumer(self, _conf: dict[str, Any]) -> Consumer:
        return Consumer(self)

    def producer(self, _settings: Settings, **_extra: str) -> Producer:
        return Producer(self)


class Consumer:
    def __init__(self, broker: Broker) -> None:
        self.broker, self.positions = broker, {}

    def committed(self, parts: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.broker.committed.get(tp.partition, OFFSET_INVALID))
                for tp in parts]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, self.broker.high[tp.partition]

    def assign(self, parts: list[TopicPartition]) -> None:
        self.positions = {tp.partition: tp.offset for tp in parts}

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        out = []
        for p, at in self.positions.items():
            out += [Message(p, o) for o in range(at, self.broker.high[p])]
            self.positions[p] = self.broker.high[p]
        return out[:num_messages]

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions[tp.partition]) for tp in parts]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.broker.committed.update({tp.partition: tp.offset for tp in offsets})

    def close(self) -> None:
        pass


class Producer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def produce(self, topic: str, key: bytes | None, value: bytes | None, partition: int, headers: list[Any],
                on_delivery: Any) -> None:  # noqa: ANN401
        self.broker.produced.append((topic, key, value, partition))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_every_late_record_of_a_closed_generation_is_rejected_and_parked_once_the_first_of_each_partition_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    broker = Broker()
    monkeypatch.setattr(generation, "history", lambda _s: [G1])
    monkeypatch.setattr(late, "closed_offsets", lambda _checkpoint, topic: dict(ENDS) if topic == "cmds" else None)
    monkeypatch.setattr(late, "Consumer", broker.consumer)
    monkeypatch.setattr(topic_io, "producer", broker.producer)
    sweeper = late.LateRecords(S)
    assert [(c.topic_commands, successor_topic) for c, _, successor_topic in sweeper.closed] == [("cmds", G1.topic)]

    assert sweeper.sweep() == 6
    late_ones = [(p, o) for p in sorted(ENDS) for o in range(ENDS[p], HIGH[p])]
    assert late_ones == [(0, 3), (0, 4), (0, 5), (1, 0), (1, 1), (3, 2)]
    want = [r[:4] for p, o in late_ones for r in late.late_outputs(
        Message(p, o).key(), Message(p, o).value(), Message(p, o).headers()[0][1], "cmds", p, o, S, G1.topic)]
    assert sorted(broker.produced) == sorted(want)
    rejected = [codec.decode_rejection(v) for t, _, v, _ in broker.produced if t == S.topic_rejections]
    assert sorted((r.original.partition, r.original.offset) for r in rejected if r.original) == late_ones
    assert broker.committed == {0: 6, 1: 2, 3: 3}
    # a second pass finds nothing new, and one more late record is the only one handled then
    assert sweeper.sweep() == 0
    broker.high[2] += 1
    assert sweeper.sweep() == 1 and broker.committed[2] == 6
    assert sweeper.handled == 7
