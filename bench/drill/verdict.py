"""What the drill checks and reports: the topics against the sequential oracle, each fault's figures, the
projections' catch-up and the audit replicas' chains."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

from app.settings import Settings
from app.validator.topic_io import read_all
from bench.drill.load import Load, Watch
from bench.drill.stack import DB_GROUP_PREFIX, audit_group_prefix
from projections.audit import verify
from schemas import codec
from tests.integration.validator_oracle import expected_from_records, topic_outputs

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Oracle:
    """The topics against ``commands.decide`` folded over the commands topic in offset order."""

    commands: int
    outputs: int
    duplicates: int  # byte-identical copies (a replayed batch); anything else differing is divergent
    divergent: frozenset[str]  # command ids of outputs the oracle does not predict
    missing: frozenset[str]    # command ids the oracle decides with no such output on the topics
    decided: frozenset[str]    # command ids with an output


def oracle(s: Settings) -> Oracle:
    """Compare the events and rejections topics with what the oracle predicts from the commands topic."""
    cmds = read_all(s, s.topic_commands)
    want = expected_from_records(cmds, s)
    got = topic_outputs(s)

    def ids(records: set) -> frozenset[str]:  # type: ignore[type-arg]
        return frozenset(str(codec.decode_outcome(r[2]).command_id) for r in records)

    return Oracle(len(cmds), len(got), len(got) - len(set(got)), ids(set(got) - set(want)),
                  ids(set(want) - set(got)), ids(set(got)))


def committed(s: Settings, group: str, topics: tuple[str, ...]) -> dict[tuple[str, int], int]:
    """The offsets ``group`` last committed (the projections commit theirs for monitoring)."""
    c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": group, "log_level": 0})
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(s.partitions)]
        return {(tp.topic, tp.partition): tp.offset for tp in c.committed(tps, timeout=10)}
    finally:
        c.close()


def retrying(ask: Callable[[], T], seconds: float = 180.0) -> T:
    """Return ``ask()``, asked again (a fresh client each time) while a broker just killed, restarted or paused
    leaves its metadata stale; raise the last error after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return ask()
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def high_watermarks(s: Settings, topics: tuple[str, ...]) -> dict[tuple[str, int], int]:
    def ask() -> dict[tuple[str, int], int]:
        c = Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "drill-watch", "log_level": 0})
        try:
            return {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                    for t in topics for p in range(s.partitions)}
        finally:
            c.close()
    return retrying(ask)


def projection_groups(s: Settings) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each projection kind's consumer group(s) and topics: the DB instances share one, each audit replica its own."""
    outs = (s.topic_events, s.topic_rejections)
    return {"db": (f"{DB_GROUP_PREFIX}-db", (s.topic_events,)),
            "audit1": (f"{audit_group_prefix(1)}-audit", outs), "audit2": (f"{audit_group_prefix(2)}-audit", outs)}


def catch_up(s: Settings, timeout: float) -> dict[str, float | None]:
    """Seconds until each projection has committed at least the output high watermarks of now (None: not within
    ``timeout``)."""
    t0 = time.monotonic()
    groups = projection_groups(s)
    target = {name: high_watermarks(s, topics) for name, (_, topics) in groups.items()}
    out: dict[str, float | None] = dict.fromkeys(groups)
    while time.monotonic() - t0 < timeout and any(v is None for v in out.values()):
        for name, (group, topics) in groups.items():
            if out[name] is None:
                try:
                    at = committed(s, group, topics)
                except Exception:  # noqa: BLE001, S112 - a broker in trouble: asked again
                    continue
                if all(at.get(tp, -1) >= hw for tp, hw in target[name].items()):
                    out[name] = time.monotonic() - t0
        time.sleep(0.5)
    return out


@dataclass
class Fault:
    """One fault's window: injected at ``at``, healed (restarted, resumed) at ``healed``, watched until ``until``."""

    name: str
    at: float
    healed: float = 0.0
    until: float = 0.0
    detail: str = ""
    decides_again_s: float | None = None
    catch_up_s: dict[str, float | None] = field(default_factory=dict)


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1]


def figures(f: Fault, load: Load, watch: Watch, o: Oracle) -> dict[str, object]:
    """The fault's row: writes, losses, divergences, 503s, latency during and after, recovery times."""
    during = [w for w in load.writes if f.at <= w.sent < f.healed]
    after = [w for w in load.writes if f.healed <= w.sent < f.until]
    mine = [w for w in load.writes if f.at <= w.sent < f.until]
    acked = {w.command_id for w in mine if w.outcome in ("accepted", "queued")}
    retries = [r for r in load.retries if f.at <= r.at < f.until]
    r503 = [r for r in retries if r.kind.startswith("503")]
    ms = [(w.done - w.sent) * 1000 for w in during]
    ms_after = [(w.done - w.sent) * 1000 for w in after]
    return {
        "fault": f.name, "detail": f.detail, "writes": len(mine), "acked": len(acked),
        "lost": len(acked - o.decided), "divergent": len({w.command_id for w in mine} & o.divergent),
        "failed_writes": sum(1 for w in mine if not w.acked),
        "503": len(r503), "503_without_retry_after": sum(1 for r in r503 if r.kind != "503"),
        "503_for_s": round(r503[-1].at - r503[0].at, 1) if r503 else 0.0,
        "transport_retries": sum(1 for r in retries if r.kind == "transport"),
        "p50_ms_during": _round(_pct(ms, 0.5)), "p99_ms_during": _round(_pct(ms, 0.99)),
        "p50_ms_after": _round(_pct(ms_after, 0.5)), "p99_ms_after": _round(_pct(ms_after, 0.99)),
        "decides_again_s": _round(watch.decides_again(f.at)),
        "catch_up_s": {k: _round(v) for k, v in f.catch_up_s.items()},
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


@dataclass(frozen=True, slots=True)
class AuditCheck:
    ok: bool
    same_heads: bool
    chains: int
    records: int
    problems: tuple[str, ...]


def audit_check(dirs: list[Path]) -> AuditCheck:
    """Both replicas' chains verify, and their heads are the same: one chain per partition, held twice."""
    reports = [verify(d) for d in dirs]
    problems = tuple(str(p) for r in reports for p in r.problems)
    same = all(r.heads == reports[0].heads for r in reports)
    return AuditCheck(all(r.ok for r in reports) and same, same, len(reports[0].heads),
                      sum(reports[0].entries.values()), problems)
