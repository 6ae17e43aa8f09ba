"""Gather the figures of the status page: topic rates, validator progress, lag, rejections by reason, hot keys,
the parking lot, and the health of the components ``arbiter run`` supervises.

Lag and hot keys are per partition of the commands topic the validator reads: after ``arbiter rescale``, the
current generation's (``follow``), not the configured one.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from app.rescale.generation import GenerationWatch, overlay
from app.run.restart import components_path, read_components
from app.settings import Settings
from app.status.history import MAX_LAG_SERIES, History, percentile
from app.status.hotkeys import HotKeys
from app.status.parked import ParkedTail
from app.validator.backends import BACKENDS
from app.validator.murmur2 import partition_for
from commands import Event, Rejection
from schemas.generations import Generation, generation_of

log = logging.getLogger(__name__)
LATENCY_MAX_S = 3600.0     # decisions older than this when seen are not latencies (a restart reading old outcomes)
LATENCY_SAMPLES = 100_000  # most latency samples kept between two computations (one a second)
ALL_COMMANDS = "(commands, every generation)"  # the watermarks' entry summing every generation's commands topic


def validator_progress_path(settings: Settings):  # noqa: ANN201
    return settings.path(settings.var_dir) / "status" / "validator-progress.json"


class StatusCollector:
    """Fed with every decision the API's outcome consumer sees; samples watermarks when asked (at most 1/s)."""

    def __init__(self, settings: Settings, min_interval: float = 1.0) -> None:
        self.settings = settings
        self.min_interval = min_interval
        self.hot = HotKeys()
        self.reasons: Counter[str] = Counter()
        self.accepted = 0
        self.rules_versions: dict[int, int] = {}  # partition -> the newest rules version its decisions named
        self.rule_rejections: Counter[str] = Counter()  # "rule (vN)" -> rejections by that rule
        self.rule_warnings: Counter[str] = Counter()  # "rule (vN, mode)" -> would-be refusals by that rule
        self._lock = threading.Lock()
        self._consumer: Consumer | None = None
        self._last: tuple[float, dict[str, int]] | None = None
        self._rates: dict[str, float] = {}
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._compute = threading.Lock()  # one computation at a time (the sampler thread and page requests)
        self._latencies: list[float] = []  # seconds from issued_at to seen here, since the last computation
        self.history = History()
        self.parked = ParkedTail(settings)
        self._sampling: threading.Event | None = None
        self._sampler: threading.Thread | None = None
        self._watch: GenerationWatch | None = None
        self._generation: tuple[Generation, Settings] | None = None

    def follow(self, watch: GenerationWatch) -> None:
        """Count lag and hot keys on the commands topic of the generation ``watch`` follows (``arbiter rescale``)."""
        self._watch = watch

    def current_settings(self) -> Settings:
        """Return the settings of the commands topic the validator reads now: the current generation's, once
        ``follow``-ing a watch. A new generation starts the per-partition counters afresh: its partitions are
        other shards (the same number means another set of objects when the count changed)."""
        if self._watch is None:
            return self.settings
        now = self._watch.generation
        known = self._generation
        if known is None or known[0] is not now:
            fresh = overlay(self.settings, now)
            if known is not None and known[1].topic_commands != fresh.topic_commands:
                with self._lock:
                    self.hot = HotKeys()
                    self.rules_versions = {}
            self._generation = known = (now, fresh)
        return known[1]

    def observe(self, outcome: Event | Rejection, partition: int | None = None) -> None:
        """Count one decision read from the events or rejections topic (partition: the object's, by murmur2 among
        the current generation's partitions)."""
        key = outcome.object_id or "(no object id)"
        if partition is None:
            partition = partition_for(key.encode(), self.current_settings().partitions)
        self.hot.add(partition, key)
        at = outcome.occurred_at  # the command's issued_at (None for a record that never was a command)
        latency = time.time() - at.timestamp() if at is not None else None
        with self._lock:
            if isinstance(outcome, Event):
                self.accepted += 1
            else:
                self.reasons[str(outcome.reason)] += 1
            version = outcome.rules_version
            if version is not None:
                if version > self.rules_versions.get(partition, 0):
                    self.rules_versions[partition] = version
                if isinstance(outcome, Rejection) and outcome.rule is not None:
                    self.rule_rejections[f"{outcome.rule} (v{version})"] += 1
                elif isinstance(outcome, Event):  # rules in warn or audit mode that would have refused it
                    for w in outcome.warnings:
                        self.rule_warnings[f"{w.rule} (v{version}, {w.mode})"] += 1
            # An old decision read again (a restart, a replay) is not a latency; nor is a skewed clock's.
            if latency is not None and 0 <= latency < LATENCY_MAX_S and len(self._latencies) < LATENCY_SAMPLES:
                self._latencies.append(latency)

    def start_sampling(self, interval: float = 1.0) -> None:
        """Compute the figures every ``interval`` seconds in a thread, so the charts' history has no holes."""
        if self._sampling is not None:
            return
        stop = self._sampling = threading.Event()

        def run() -> None:
            while not stop.wait(interval):
                try:
                    self.snapshot()
                except Exception:  # noqa: BLE001 - the page goes on; the next second tries again
                    log.exception("status figures failed")

        self._sampler = threading.Thread(target=run, name="status-sampler", daemon=True)
        self._sampler.start()

    def _watermarks(self) -> dict[str, dict[int, int]]:
        """Return the end offsets of the current commands topic and the output topics, by topic and partition, and
        under ``ALL_COMMANDS`` the sum of every generation's commands topic (the total written)."""
        if self._consumer is None:
            self._consumer = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap,
                                       "group.id": "arbiter-status", "log_level": 0})
        s = self.current_settings()
        out: dict[str, dict[int, int]] = {}
        md = self._consumer.list_topics(timeout=5)
        older = [t for t in md.topics if t != s.topic_commands
                 and generation_of(self.settings.topic_commands, t) is not None]
        for topic in (s.topic_commands, s.topic_events, s.topic_rejections, *older):
            meta = md.topics.get(topic)
            parts = sorted(meta.partitions) if meta is not None and meta.error is None else []
            out[topic] = {p: self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in parts}
        out[ALL_COMMANDS] = {0: sum(sum(out.pop(t).values()) for t in older) + sum(out[s.topic_commands].values())}
        return out

    def _validator(self) -> dict[str, Any]:
        try:
            progress = json.loads(validator_progress_path(self.settings).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            progress = {}
        end: dict[str, int] = {}
        for src in progress.get("sources") or []:
            offsets = src.get("endOffset")
            if isinstance(offsets, str):
                try:
                    offsets = json.loads(offsets)
                except json.JSONDecodeError:
                    offsets = None
            if isinstance(offsets, dict):
                for p, off in (offsets.get(self.current_settings().topic_commands) or {}).items():
                    end[str(p)] = int(off)
        figures = {
            "batch_id": progress.get("batchId"),
            "timestamp": progress.get("timestamp"),
            "input_rows": progress.get("numInputRows"),
            "rows_per_s": round(float(progress["processedRowsPerSecond"]), 1)
            if progress.get("processedRowsPerSecond") is not None else None,
            "batch_duration_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
            "state": self._state(progress),
            "end_offsets": end,
        }
        return figures if progress or figures["state"] else {}

    def _state(self, progress: dict[str, Any]) -> dict[str, Any] | None:
        """Return the validator's state figures: the first backend that has any (Spark's state operators in the
        progress, else the rocksdb shard servers' files), else None (unknown: the page shows "–", never a zero
        nobody measured)."""
        for backend in BACKENDS.values():
            state = backend.state(self.settings, progress)
            if state is not None:
                return state
        return None

    def snapshot(self) -> dict[str, Any]:
        """The page's figures; recomputed at most every ``min_interval`` seconds."""
        with self._compute:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            if self._cached is not None and now - self._cached[0] < self.min_interval:
                return self._cached[1]
        s = self.current_settings()
        try:
            marks = self._watermarks()
            broker = "up"
        except KafkaException:
            marks, broker = {}, "unreachable"
        totals = {t: sum(v.values()) for t, v in marks.items()}
        if self._last is not None and totals:
            dt = now - self._last[0]
            if dt > 0:
                # a topic first seen now (a new generation) has no rate yet: its records are not this second's
                self._rates = {t: max(0.0, (totals[t] - self._last[1][t]) / dt) for t in totals if t in self._last[1]}
        if totals:
            self._last = (now, totals)
        validator = self._validator()
        parking = self.parked.figures() if broker == "up" else None
        ends = validator.get("end_offsets", {})
        lag = {str(p): hi - ends.get(str(p), 0) for p, hi in (marks.get(s.topic_commands) or {}).items()}
        with self._lock:
            latencies, self._latencies = self._latencies, []
        self._record(validator, lag, latencies)
        with self._lock:
            data = {
                "broker": broker,
                "commands_in_per_s": round(self._rates.get(ALL_COMMANDS, 0.0), 1),
                "events_out_per_s": round(self._rates.get(s.topic_events, 0.0), 1),
                "rejections_out_per_s": round(self._rates.get(s.topic_rejections, 0.0), 1),
                "totals": {"commands": totals.get(ALL_COMMANDS, 0), "events": totals.get(s.topic_events, 0),
                           "rejections": totals.get(s.topic_rejections, 0)},
                "accepted_seen": self.accepted,
                "rejections_by_reason": dict(sorted(self.reasons.items())),
                "rules_version_by_partition": {str(p): v for p, v in sorted(self.rules_versions.items())},
                "rejections_by_rule": dict(sorted(self.rule_rejections.items())),
                "warnings_by_rule": dict(sorted(self.rule_warnings.items())),
                "lag_by_partition": lag,
                "validator": {k: v for k, v in validator.items() if k != "end_offsets"},
                "history": self.history.columns(),
                # The parking lot (docs/operations/parking-lot.md): None while its topics cannot be read.
                "parking_lot": parking,
                "hot_keys": {str(p): [{"object_id": k, "count": c, "error": e} for k, c, e in top]
                             for p, top in self.hot.top(5).items()},
                # Written by `arbiter run` (app/run/supervisor.py); empty when the API runs on its own.
                "components": read_components(components_path(s)),
                # The thread following the generations topic (app.rescale.generation): were it dead, writes would
                # not pause for a rescale nor follow it; failed ticks and skipped records are counted.
                "generation_watch": None if self._watch is None else {
                    "generation": self._watch.generation.number, "paused": self._watch.generation.paused,
                    "alive": self._watch.alive, "failures": self._watch.failures,
                    "last_error": self._watch.last_error, "skipped_records": self._watch.chain.skipped},
            }
            self._cached = (now, data)
        return data

    def _record(self, validator: dict[str, Any], lag: dict[str, int], latencies: list[float]) -> None:
        """Add this second's point to the charts' history."""
        s, state = self.settings, validator.get("state") or {}
        p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
        point: dict[str, Any] = {
            "t": round(time.time(), 3),
            "commands_in": round(self._rates.get(ALL_COMMANDS, 0.0), 1) if self._rates else None,
            "events_out": round(self._rates.get(s.topic_events, 0.0), 1) if self._rates else None,
            "rejections_out": round(self._rates.get(s.topic_rejections, 0.0), 1) if self._rates else None,
            "latency_p50_ms": round(p50 * 1000, 1) if p50 is not None else None,
            "latency_p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
            "state_rows": state.get("rows"), "state_memory_bytes": state.get("memory_bytes"),
            "lag_total": sum(lag.values()) if lag else None,
        }
        if len(lag) <= MAX_LAG_SERIES:
            point.update({f"lag_{p}": n for p, n in sorted(lag.items(), key=lambda x: int(x[0]))})
        self.history.add(point)

    def close(self) -> None:
        if self._sampling is not None:
            self._sampling.set()
        if self._sampler is not None:
            self._sampler.join(30)  # a computation in flight still uses the consumer (broker calls time out in 5 s)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self.parked.close()
