"""Latency per page of lists (``GET /objects``) and of history reads (``GET /objects/{id}/events`` and
``?version=N``) on a read model of N objects, per backend, through the read model's own reader.

The read model is filled through the DB projection's code (``DbProjection.apply`` into the backend's store:
views, history and the access index in the same writes as in production), from events made by ``commands.decide``,
with no Kafka and no Spark. Each object is created by one of ``--principals`` owners, gets an editor, a reader
(some of them groups) and ``--updates`` updates. Then, for random principals, lists are paged (``--pages`` pages
of ``--limit`` by cursor, all roles and one role at a time), and for random objects the first page of history is
read and the document folded as of a random version. Prints p50/p99/max per kind of read.

Run: ``.venv/bin/python -m bench.projections.lists --objects 1000000`` (``--backend rocksdb,postgresql``; for
postgresql uses ``ARBITER_POSTGRES_DSN`` if set, else starts a throwaway server, stopped by its PID).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from app.read_models import open_reader, open_writer
from app.settings import Settings
from bench.harness import postgres_databases
from commands import CreateObject, Event, GrantEditor, GrantReader, UpdateObject, decide
from projections.db import DbProjection
from projections.db.history import fold
from projections.db.lists import Role, grantees
from projections.runner import Item, Projection, Record

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def events(n: int, principals: int, updates: int, seed: int) -> Iterator[list[Event]]:
    """Yield each object's events (created, granted an editor and a reader, updated), objects interleaved in time."""
    rnd = random.Random(seed)
    for i in range(n):
        oid, owner = f"obj-{i:08d}", f"user-{rnd.randrange(principals)}"
        editor = f"group:team-{rnd.randrange(principals // 10 + 1)}" if rnd.random() < 0.2 else \
            f"user-{rnd.randrange(principals)}"
        reader = f"user-{rnd.randrange(principals)}"
        at = T0 + timedelta(microseconds=i * 1000)
        cmds = [CreateObject(f"{oid}-c", oid, owner, at, document=json.dumps({"title": oid, "n": i, "text": "x" * 60})),
                GrantEditor(f"{oid}-e", oid, owner, at, editor=editor),
                GrantReader(f"{oid}-r", oid, owner, at, reader=reader)]
        cmds += [UpdateObject(f"{oid}-u{u}", oid, owner, at + timedelta(hours=u + 1), patch=json.dumps({"n": u}))
                 for u in range(updates)]
        state, out = None, []
        for c in cmds:
            d = decide(state, c)
            state = d.state
            if isinstance(d.outcome, Event):  # an owner granted a role it holds is rejected: no event
                out.append(d.outcome)
        yield out


def fill(s: Settings, n: int, principals: int, updates: int, batch: int, projection: Projection | None = None,
         value: Callable[[Event], bytes] | None = None) -> tuple[float, int]:
    """Fill the read model of ``s`` through the DB projection (or the events through ``projection``, each record's
    value ``value(event)``, else empty); return (seconds, events)."""
    projection = projection or DbProjection(open_writer(s))
    start, offset, items = time.perf_counter(), 0, []
    for evs in events(n, principals, updates, seed=1):
        for ev in evs:
            body = value(ev) if value is not None else b""
            items.append(Item(Record(s.topic_events, 0, offset, ev.object_id.encode(), body, 0), ev))
            offset += 1
        if len(items) >= batch:
            projection.apply(items)
            items = []
    if items:
        projection.apply(items)
    projection.close()
    return time.perf_counter() - start, offset


def timed(samples: list[float], fn: Callable[[], Any]) -> Any:  # noqa: ANN401
    t = time.perf_counter()
    out = fn()
    samples.append(time.perf_counter() - t)
    return out


def figures(name: str, samples: list[float]) -> str:
    xs = sorted(samples)
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))] * 1000  # noqa: E731
    return f"  {name:<34} n={len(xs):>6}  p50 {q(0.5):7.2f} ms  p99 {q(0.99):7.2f} ms  max {xs[-1] * 1000:7.2f} ms"


def measure(s: Settings, n: int, principals: int, reads: int, pages: int, limit: int) -> None:
    rm: Any = open_reader(s)
    rnd = random.Random(2)
    lists_all: list[float] = []
    lists_role: list[float] = []
    listed = 0
    for _ in range(reads):
        who = f"user-{rnd.randrange(principals)}"
        groups = (f"team-{rnd.randrange(principals // 10 + 1)}",)
        for samples, role in ((lists_all, None), (lists_role, rnd.choice(list(Role)))):
            after, ranges = None, grantees(who, groups, role)
            for _ in range(pages):
                page = timed(samples, lambda r=ranges, a=after: rm.page(r, 0, a, limit))
                listed += len(page.items)
                if not page.more:
                    break
                last = page.items[-1]
                after = (last.updated_us, last.id)
    history: list[float] = []
    as_of: list[float] = []
    for _ in range(reads):
        oid = f"obj-{rnd.randrange(n):08d}"
        entries = timed(history, lambda o=oid: rm.history(o, 0, limit + 1))
        version = rnd.randint(1, len(entries))
        timed(as_of, lambda o=oid, v=version: fold(o, rm.history(o, 0, None, v), v))
    print(figures(f"list page, all roles (limit {limit})", lists_all))
    print(figures(f"list page, one role (limit {limit})", lists_role))
    print(figures("history page (first)", history))
    print(figures("document as of a version (fold)", as_of))
    print(f"  ({listed} objects listed; history store {rm.history_size()})")
    rm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--principals", type=int, default=2_000)
    ap.add_argument("--updates", type=int, default=2, help="updates per object after its create and two grants")
    ap.add_argument("--reads", type=int, default=500, help="principals listed and objects whose history is read")
    ap.add_argument("--pages", type=int, default=5, help="pages followed per list")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--batch", type=int, default=5000, help="events per projection batch while filling")
    ap.add_argument("--backend", default="rocksdb,postgresql", help="comma-separated read-model backends")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    backends = args.backend.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench-lists-"))
    work.chmod(0o755)  # the throwaway PostgreSQL server runs as the postgres user under root
    print(f"{args.objects:,} objects, {args.principals:,} principals, {3 + args.updates} events each; "
          f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs")
    try:
        with postgres_databases(work) as database:
            for backend in backends:
                s = Settings(read_model=backend, read_model_dir=work / "rm", projection_sync_writes=False,
                             topic_events="bench-events")
                if backend == "postgresql":
                    name = f"bench_{uuid.uuid4().hex[:8]}"
                    s.postgres_dsn = SecretStr(database(name))
                    s.postgres_schema = name
                took, n = fill(s, args.objects, args.principals, args.updates, args.batch)
                print(f"{backend}: filled {n:,} events in {took:.1f} s ({n / took:,.0f} events/s)")
                measure(s, args.objects, args.principals, args.reads, args.pages, args.limit)
    finally:
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
