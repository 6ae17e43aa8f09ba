"""Which commands topic, partition count and validator checkpoint are current: the generations topic's last record.

Generation 0 is what the settings name (``topic_commands``, ``partitions``, ``checkpoint_uri``); each
``arbiter rescale`` adds one: ``<topic_commands>.g<k>`` with its own partition count and its own checkpoint
under ``<checkpoint>/generations/g<k>`` (Spark fixes a checkpoint's partitions at its first batch). The record
lives on a one-partition topic that keeps everything (retention -1, no compaction): its history is the audit
trail of the changes, each with its time and who ran it, and every old generation stays readable. The
validator and the API read it at start (``generation_settings``); the API also follows it while it runs, to
pause writes during a cut-over and switch topics after it (``GenerationWatch``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition

from app.errors import BrokerUnavailable
from app.rescale.errors import BadRequest, WritesPaused
from app.settings import Settings, checkpoint_uri
from app.signing import SIGNATURE_HEADER, checker_for, signer_for
from app.validator.topic_io import Record, produce_with_headers, read_all
from schemas.generations import KEY, Generation, generation_topic
from schemas.parked import VALID

log = logging.getLogger(__name__)

#: How often a running API looks for a new generation; a rescale waits twice this after pausing writes.
WATCH_INTERVAL_S = 1.0


def first(settings: Settings) -> Generation:
    """Return generation 0: what the (unrescaled) settings name."""
    return Generation(0, settings.topic_commands, settings.partitions, checkpoint_uri(settings))


def successor(settings: Settings, current: Generation, partitions: int) -> Generation:
    """Return the generation after ``current`` with ``partitions`` partitions (names derived from the settings)."""
    k = current.number + 1
    return Generation(k, generation_topic(settings.topic_commands, k), partitions,
                      f"{checkpoint_uri(settings).rstrip('/')}/generations/g{k}")


def history(settings: Settings) -> list[Generation]:
    """Return every genuine generation record, oldest first (empty before the first rescale).

    A record is signed like a command record (``app.signing``): the generation names the topic the API writes to
    and the validator reads, so one produced by anyone else is ignored (and logged), as a forged control record is.
    """
    try:
        records = read_all(settings, settings.generations_topic)
    except KeyError:  # the topic does not exist: no rescale yet
        return []
    return [Generation.parse(r.value) for r in records if r.key == KEY and r.value and _genuine(settings, r)]


def _genuine(settings: Settings, record: Record) -> bool:
    """Whether ``record`` carries a valid signature (or unsigned producers are allowed); log it if not."""
    checker = checker_for(settings)
    if checker is None:
        return True
    signature = next((bytes(v) for k, v in record.headers if k == SIGNATURE_HEADER and v is not None), None)
    status, why = checker.verdict(record.key, record.value, signature)
    if status == VALID:
        return True
    log.warning("ignoring generation record %s[%d]@%d: %s", record.topic, record.partition, record.offset, why)
    return False


def every(settings: Settings) -> list[Generation]:
    """Return every generation that was ever current, generation 0 first, each as its last record names it.

    A generation is current from its switch until the next one; the readers of the whole history (the archive,
    ``arbiter verify``) read each one's topic in this order: a rescale drains one before the next is published.
    """
    latest = {0: first(settings)}
    for g in history(settings):
        latest[g.number] = replace(g, paused=False)
    return [latest[k] for k in sorted(latest)]


def current(settings: Settings) -> Generation:
    """Return the current generation: the last record, or generation 0 before any rescale."""
    records = history(settings)
    return records[-1] if records else first(settings)


def publish(settings: Settings, generation: Generation, by: str) -> Generation:
    """Append ``generation`` (stamped now, by ``by``) to the generations topic, creating it first; return it."""
    ensure_generations_topic(settings)
    stamped = replace(generation, at=datetime.now(UTC).isoformat(), by=by)
    value = stamped.dumps()
    produce_with_headers(settings, [(KEY, value, signer_for(settings).headers(KEY, value), None)],
                         settings.generations_topic)
    return stamped


def ensure_generations_topic(settings: Settings) -> None:
    """Create the generations topic if missing: one partition, kept forever (it is the history)."""
    from app.topics import ensure_history_topic

    ensure_history_topic(settings, settings.generations_topic, "generations topic")


def overlay(settings: Settings, generation: Generation) -> Settings:
    """Return ``settings`` for ``generation``: its commands topic, partitions and checkpoint; every other topic kept."""
    if generation.number == 0:
        return settings
    return settings.model_copy(update={
        "topic_commands": generation.topic, "partitions": generation.partitions,
        "checkpoint_location": generation.checkpoint, "output_partitions": settings.output_partitions or settings.partitions,
        # The new topic is read whole: every command on it came after the cut-over, none is before its seed.
        "starting_offsets": "earliest",
        # Names derived from topic_commands stay the configured ones: only the commands topic has generations.
        "topic_parked": settings.parked_topic, "topic_rules": settings.rules_topic,
        "topic_parked_log": settings.parked_log_topic, "topic_generations": settings.generations_topic,
        "topic_commands_source": settings.topic_commands_source or settings.topic_commands,
    })


def generation_settings(settings: Settings) -> Settings:
    """Return ``settings`` for the current generation (read from the generations topic).

    A rescaled generation's state is in rocksdb shards seeded by the rescale: the spark backend would start it
    empty, so it is refused (``RESCALE_REFUSED``).
    """
    now = current(settings)
    if now.number > 0 and settings.state_backend != "rocksdb":
        raise BadRequest(f"the commands topic was rescaled (generation {now.number}, {now.topic}); its state is in "
                         "rocksdb shards, so ARBITER_STATE_BACKEND must be rocksdb")
    return overlay(settings, now)


def exit_on_switch(settings: Settings, running: Settings) -> GenerationWatch:
    """Send this process SIGTERM once the current generation is not the one ``running`` reads.

    The validator's planned stop for a rescale: it has drained its topic by then (the rescale checked), stops
    cleanly handing its lease over, and the supervisor behind ``arbiter run`` starts it again, which reads
    the new generation.
    """
    def changed(now: Generation) -> None:
        if now.topic != running.topic_commands:  # switched to, or being rescaled again: start on it to drain it
            log.warning("commands generation %d (%s) is current: stopping this validator so that it starts "
                        "again on it", now.number, now.topic)
            os.kill(os.getpid(), signal.SIGTERM)

    return GenerationWatch(settings, WATCH_INTERVAL_S * 2, on_change=changed).start()


def current_generation_settings(settings: Settings) -> Settings:
    """Return ``generation_settings`` for a writer to the commands topic; raise ``WritesPaused`` during a cut-over."""
    now = current(settings)
    if now.paused:
        raise WritesPaused(f"a rescale is cutting {now.topic} over to a new generation; retry after it "
                           "(`arbiter rescale --status`)")
    return overlay(settings, now)


class GenerationWatch:
    """Follow the current generation from a thread: the API pauses writes and switches topics by it.

    Each tick asks only the generations topic's end offset (one request on a consumer kept open), and reads
    the records again when it moved.
    """

    def __init__(self, settings: Settings, interval_s: float = WATCH_INTERVAL_S,
                 on_change: Callable[[Generation], None] | None = None) -> None:
        self.settings = settings
        self.interval_s = interval_s
        self.on_change = on_change
        self.generation = current(settings)
        self._end = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arbiter-generation", daemon=True)

    def start(self) -> GenerationWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap, "group.id": "arbiter-generation",
                             "log_level": 0, **self.settings.kafka_config})
        try:
            while not self._stop.wait(self.interval_s):
                try:
                    end = consumer.get_watermark_offsets(TopicPartition(self.settings.generations_topic, 0),
                                                         timeout=5)[1]
                    if end != self._end:
                        self._end, now = end, current(self.settings)
                        if now != self.generation:
                            log.warning("commands generation %d -> %d (%s, %d partitions%s)", self.generation.number,
                                        now.number, now.topic, now.partitions, ", writes paused" if now.paused else "")
                            self.generation = now
                            if self.on_change is not None:
                                self.on_change(now)
                except (KafkaException, BrokerUnavailable) as e:  # not created yet, or the broker is away: keep it
                    log.debug("generation not read: %s", e)
        finally:
            consumer.close()
