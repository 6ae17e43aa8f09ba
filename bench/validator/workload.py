"""The benchmark's commands: M commands over N objects, each object's first command a create, then updates."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from commands import Command, CreateObject, UpdateObject
from schemas import codec

T0 = datetime(2025, 1, 1, tzinfo=UTC)


#: What a typed create adds to its document (``--rules``): the members ``bench.domain_rules.REALISTIC`` tracks, a
#: draft order its transition map lets start; the updates stay ``{"n": i}``, so every guard runs and passes.
TYPED_MEMBERS = ', "status": "draft", "amount": 100, "customer": "acme", "priority": 3'


def commands(objects: int, count: int, seed: int = 7, object_type: str | None = None) -> Iterator[Command]:
    """Yield ``count`` commands on objects drawn uniformly from ``objects`` ids (deterministic for a seed); with
    ``object_type`` the same commands, each create naming that type and carrying ``TYPED_MEMBERS``."""
    rng = random.Random(seed)
    seen: set[int] = set()
    extra = TYPED_MEMBERS if object_type is not None else ""
    for i in range(count):
        o = rng.randrange(objects)
        oid = f"obj-{o:08d}"
        at = T0 + timedelta(milliseconds=i)
        if o in seen:
            yield UpdateObject(f"cmd-{i}", oid, "alice", at, patch=f'{{"n": {i}}}')
        else:
            seen.add(o)
            yield CreateObject(f"cmd-{i}", oid, "alice", at, document=f'{{"id": "{oid}", "n": 0{extra}}}',
                               object_type=object_type)


def records(objects: int, count: int, seed: int = 7, object_type: str | None = None) -> list[tuple[bytes, bytes]]:
    """Return the commands as (key, value) Kafka records."""
    return [(c.object_id.encode(), codec.encode_command(c)) for c in commands(objects, count, seed, object_type)]
