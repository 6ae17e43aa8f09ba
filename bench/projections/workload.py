"""A realistic decision stream for the projection tests and benchmark: generated commands run through ``decide``."""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from confluent_kafka import Producer

from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    GrantReader,
    ObjectState,
    Rejection,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    decide,
)
from schemas import codec

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def decisions(n_objects: int, n_commands: int, seed: int = 7) -> list[Event | Rejection]:
    """Generate commands against the current states and run each through ``decide``; return every outcome.

    Mostly updates (10% with a stale expected version), some editor and reader grants and revokes, rare deletes,
    client retries, and a few commands at deleted objects. Reader grants are here so that a read model losing the
    ``readers`` role (e.g. left out of an upsert) fails the projection contract tests.
    """
    rnd = random.Random(seed)
    states: dict[str, ObjectState | None] = {}
    sent: list[Command] = []
    outcomes: list[Event | Rejection] = []
    for i in range(n_commands):
        oid = f"obj-{rnd.randrange(n_objects):05d}"
        at = BASE + timedelta(milliseconds=i)
        owner = f"user-{int(oid[4:]) % 7}"
        st = states.get(oid)
        r = rnd.random()
        cmd: Command
        if st is None:
            doc = {"title": f"t{i}", "n": i, "tags": [rnd.randrange(9) for _ in range(3)], "meta": {"a": 1}}
            cmd = CreateObject(f"c{i}", oid, owner, at, document=json.dumps(doc))
        elif r < 0.03 and sent:
            cmd = sent[rnd.randrange(len(sent))]  # a client retry: the same command again
        elif r < 0.04:
            cmd = DeleteObject(f"c{i}", oid, owner, at)
        elif r < 0.08:
            cmd = GrantEditor(f"c{i}", oid, owner, at, editor=f"ed-{rnd.randrange(3)}")
        elif r < 0.10:
            cmd = RevokeEditor(f"c{i}", oid, owner, at, editor=f"ed-{rnd.randrange(3)}")
        elif r < 0.13:
            cmd = GrantReader(f"c{i}", oid, owner, at, reader=f"rd-{rnd.randrange(3)}")
        elif r < 0.15:
            held = sorted(st.readers)  # revoke one held, so revokes land as often as grants do
            reader = held[rnd.randrange(len(held))] if held else f"rd-{rnd.randrange(3)}"
            cmd = RevokeReader(f"c{i}", oid, owner, at, reader=reader)
        else:
            patch = {"n": i, "meta": {"b": rnd.randrange(100), "a": None if rnd.random() < 0.3 else 2}}
            expected = st.version if rnd.random() < 0.9 else max(0, st.version - 1)
            cmd = UpdateObject(f"c{i}", oid, owner, at, expected, patch=json.dumps(patch))
        d = decide(states.get(cmd.object_id), cmd)  # a retry may be about another object
        states[cmd.object_id] = d.state
        sent.append(cmd)
        outcomes.append(d.outcome)
    return outcomes


def partition_of(object_id: str, partitions: int) -> int:
    """Stable object placement; the validator writes every outcome to the command's partition."""
    return zlib.crc32(object_id.encode()) % partitions


def encoded(outcomes: Iterable[Event | Rejection], partitions: int) -> list[tuple[bool, int, bytes, bytes]]:
    """Return (is_event, partition, key, value) per outcome, encoded with the codec."""
    return [(isinstance(o, Event), partition_of(o.object_id or "", partitions), (o.object_id or "").encode(),
             codec.encode_outcome(o)) for o in outcomes]


def produce(bootstrap: str, events_topic: str, rejections_topic: str,
            records: Iterable[tuple[bool, int, bytes, bytes]]) -> int:
    """Produce encoded outcomes with explicit partitions, in order; return how many."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "enable.idempotence": True,
                  "batch.num.messages": 10000})
    n = 0
    for is_event, part, key, value in records:
        while True:
            try:
                p.produce(events_topic if is_event else rejections_topic, value, key, partition=part)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
    if p.flush(30) != 0:
        raise RuntimeError("records still undelivered after 30s")
    return n
