"""Which commands topic, partition count and validator checkpoint are current: the generations topic's last record.

Generation 0 is what the settings name (``topic_commands``, ``partitions``, ``checkpoint_uri``); each
``arbiter rescale`` adds one: ``<topic_commands>.g<k>`` with its own partition count and its own checkpoint
under ``<checkpoint>/generations/g<k>`` (Spark fixes a checkpoint's partitions at its first batch). The record
lives on a one-partition topic that keeps everything (retention -1, no compaction): its history is the audit
trail of the changes, each with its time and who ran it, and every old generation stays readable. The
validator and the API read it at start (``generation_settings``); the API also follows it while it runs, to
pause writes during a cut-over and switch topics after it (``GenerationWatch``). Every one of them reads the topic
through the same fold (``app.rescale.chain``), which decides which records count.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition

from app.errors import BrokerUnavailable
from app.rescale.chain import GenerationChain
from app.rescale.errors import BadRequest, WritesPaused
from app.settings import Settings, checkpoint_uri
from app.signing import GENERATION_DOMAIN, signer_for
from app.validator.topic_io import Record, produce_with_headers, read_all
from schemas.generations import KEY, Generation, generation_topic

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


def chain(settings: Settings, on_skip: Callable[[Record, str], None] | None = None) -> GenerationChain:
    """Return the generations topic folded (``app.rescale.chain``): the records that count, and where it ended."""
    folded = GenerationChain(settings, first(settings), on_skip)
    return follow(settings, folded)


def follow(settings: Settings, folded: GenerationChain) -> GenerationChain:
    """Fold what was appended to the generations topic since ``folded`` last read it; return it."""
    try:
        records = read_all(settings, settings.generations_topic, since=folded.next_offset)
    except KeyError:  # the topic does not exist: no rescale yet
        return folded
    return folded.extend(r for r in records if r.offset >= folded.next_offset)


def history(settings: Settings) -> list[Generation]:
    """Return every generation record that counts (``app.rescale.chain``), oldest first (empty before the first
    rescale): unsigned, forged, unparsable and replayed records are ignored (and logged)."""
    return chain(settings).records


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
    """Return the current generation: the last record that counts, or generation 0 before any rescale."""
    return chain(settings).current


def publish(settings: Settings, generation: Generation, by: str) -> Generation:
    """Append ``generation`` (stamped now, by ``by``, after the last record that counts) to the generations topic,
    creating it first; return it."""
    ensure_generations_topic(settings)
    stamped = replace(generation, at=datetime.now(UTC).isoformat(), by=by, previous=chain(settings).head)
    value = stamped.dumps()
    produce_with_headers(settings, [(KEY, value, signer_for(settings, GENERATION_DOMAIN).headers(KEY, value), None)],
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
    return validator_settings(settings, current(settings))


def validator_settings(settings: Settings, now: Generation) -> Settings:
    """Return ``settings`` for a validator of generation ``now``; refuse the spark backend after a rescale."""
    if now.number > 0 and settings.state_backend != "rocksdb":
        raise BadRequest(f"the commands topic was rescaled (generation {now.number}, {now.topic}); its state is in "
                         "rocksdb shards, so ARBITER_STATE_BACKEND must be rocksdb")
    return overlay(settings, now)


def current_generation_settings(settings: Settings) -> Settings:
    """Return ``generation_settings`` for a writer to the commands topic; raise ``WritesPaused`` during a cut-over."""
    now = current(settings)
    if now.paused:
        raise WritesPaused(f"a rescale is cutting {now.topic} over to a new generation; retry after it "
                           "(`arbiter rescale --status`)")
    return overlay(settings, now)


class GenerationWatch:
    """Follow the current generation from a thread: the API pauses writes and switches topics by it.

    Each tick asks only the generations topic's end offset (one request on a consumer kept open) and, when it
    moved, folds only the records appended since (``app.rescale.chain``): junk on the topic costs each record
    once. Nothing a record holds stops the thread: a tick that fails is logged and counted (``failures``,
    ``last_error``) and the next one tries again; ``alive`` says whether the thread runs (the status page shows it).
    """

    def __init__(self, settings: Settings, interval_s: float = WATCH_INTERVAL_S,
                 on_change: Callable[[Generation], None] | None = None,
                 on_skip: Callable[[Record, str], None] | None = None) -> None:
        self.settings = settings
        self.interval_s = interval_s
        self.on_change = on_change
        self.chain = chain(settings, on_skip)
        self.generation = self.chain.current
        self.failures = 0
        self.last_error: str | None = None
        self._end = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arbiter-generation", daemon=True)

    def start(self) -> GenerationWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    @property
    def alive(self) -> bool:
        """Whether the watching thread runs."""
        return self._thread.is_alive()

    def tick(self, end: int) -> None:
        """Fold what is new on the generations topic when its end offset is not ``end`` any more; say a change."""
        if end == self._end:
            return
        if end < self.chain.next_offset:  # the topic was deleted and made again: fold it afresh
            self.chain = GenerationChain(self.settings, first(self.settings), self.chain.on_skip)
        now = follow(self.settings, self.chain).current
        self._end = end
        if now != self.generation:
            log.warning("commands generation %d -> %d (%s, %d partitions%s)", self.generation.number, now.number,
                        now.topic, now.partitions, ", writes paused" if now.paused else "")
            self.generation = now
            if self.on_change is not None:
                self.on_change(now)

    def _run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap, "group.id": "arbiter-generation",
                             "log_level": 0, **self.settings.kafka_config})
        try:
            while not self._stop.wait(self.interval_s):
                try:
                    self.tick(consumer.get_watermark_offsets(TopicPartition(self.settings.generations_topic, 0),
                                                             timeout=5)[1])
                except (KafkaException, BrokerUnavailable) as e:  # not created yet, or the broker is away: keep it
                    log.debug("generation not read: %s", e)
                except Exception as e:  # noqa: BLE001 - the watch must outlive anything: counted, logged, retried
                    self.failures += 1
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.exception("the generation watch failed a tick (tried again in %g s)", self.interval_s)
        finally:
            consumer.close()
