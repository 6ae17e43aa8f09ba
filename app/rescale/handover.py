"""A running validator's hand-over at a rescale's switch: stop the drained generation's query, start the next one's
in the same process and Spark session.

Before, the validator exited at the switch (SIGTERM to itself) and whatever supervised it started a new process:
a new Python, a new Spark JVM, new Python workers and shard servers, JIT and codegen from cold, 16–23 s on this
project's machine before the new generation's first decision (issue 51). Kept in one process, only what belongs to
a generation changes: its query (topic, checkpoint, partition count), its lease and its shards. What a switch
guarantees is unchanged: the rescale publishes it only once the old topic is drained (``app.rescale.steps``), so
every command before the cut-over is decided before any after it, whichever process decides them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.rescale.generation import GenerationWatch, overlay, validator_settings
from app.settings import Settings
from schemas.generations import Generation

log = logging.getLogger(__name__)

#: How often a running validator asks the generations topic's end offset (one request on a consumer kept open):
#: the longest a switch waits to be seen by it.
HANDOVER_INTERVAL_S = 0.2


class Handover:
    """Follow the generations topic for a running validator: ``settings()`` is the generation it runs; ``switched``
    is set once another generation is current, and ``next_settings()`` moves to that one.

    ``warm(settings)`` (if given) prepares what a generation's query will need that holds no state (the shard
    servers of its checkpoint: ``app.validator.rocks.client.start_servers``). It is called in a thread of its own
    when the running generation is paused (the rescale's plan names the next one) and again at the switch, so
    the pause and the old query's stop hide its cost. Nothing it does may read the new generation's seeds: a
    switch that finds a late write discards them and splits again.
    """

    def __init__(self, settings: Settings, interval_s: float = HANDOVER_INTERVAL_S,
                 warm: Callable[[Settings], object] | None = None, watch: GenerationWatch | None = None) -> None:
        self.base = settings
        self.warm = warm
        self.switched = threading.Event()
        self._guard = threading.Lock()
        self.watch = watch or GenerationWatch(settings, interval_s, on_change=self._changed)
        self.running = self.watch.generation

    def start(self) -> Handover:
        self.watch.start()
        return self

    def stop(self) -> None:
        self.watch.stop()

    def settings(self) -> Settings:
        """Return the validator's settings for the generation it runs (``validator_settings``)."""
        return validator_settings(self.base, self.running)

    def _changed(self, now: Generation) -> None:
        if now.paused and now.number == self.running.number:
            self._warm_next()
        with self._guard:
            # Another number: switched to (or, started on a paused generation, that one was rescaled again).
            # Only the same generation paused keeps the query: it must drain its topic.
            if now.number != self.running.number and not self.switched.is_set():
                log.warning("commands generation %d (%s) is current: handing this validator over to it", now.number,
                            now.topic)
                self.switched.set()

    def next_settings(self) -> Settings:
        """Move to the generation current now (as the watch last read it) and return its settings."""
        with self._guard:
            self.running = self.watch.generation
            self.switched.clear()
        settings = self.settings()
        self._warm(settings)  # if the pause was not seen (started during it), or the warm servers went idle
        return settings

    def _warm_next(self) -> None:
        """Warm the generation the rescale under way switches to (its plan names it)."""
        from app.rescale.steps import read_plan

        try:
            plan = read_plan(self.base)
        except Exception as e:  # noqa: BLE001 - warming is an optimisation: the hand-over does without it
            log.warning("no rescale plan read to warm the next generation: %s", e)
            return
        if plan is not None and plan.source.number == self.running.number:
            self._warm(overlay(self.base, plan.target))

    def _warm(self, settings: Settings) -> None:
        warm = self.warm
        if warm is None:
            return

        def run() -> None:
            try:
                warm(settings)
            except Exception as e:  # noqa: BLE001 - an optimisation: the first batch starts what is missing
                log.warning("warming generation %s failed: %s", settings.topic_commands, e)

        threading.Thread(target=run, name="arbiter-handover-warm", daemon=True).start()
