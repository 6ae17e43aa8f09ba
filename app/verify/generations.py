"""The commands topics a replay re-decides: every generation's (``arbiter rescale``), in the order they were current.

A rescale drains generation k before it publishes k + 1, so every command of an object in generation k was decided
before any of its commands in k + 1: a replay folds an object's commands in (generation, partition, offset) order,
carrying its state over, and decides each with the settings its validator had (that generation's partition count,
which the MISROUTED check and the outputs' partitions use, and its topic, which rejections name). A record of a
closed generation past the offsets its validator committed arrived after the switch: nothing decided it, and
``app.rescale.late`` rejected and parked it (``late``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.settings import Settings
from schemas.generations import Generation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommandTopics:
    """Each generation's commands topic with its number and the settings its validator decided with."""

    numbers: Mapping[str, int]
    settings_by_topic: Mapping[str, Settings]
    closed: Mapping[str, Mapping[int, int]] = field(default_factory=dict)  # topic -> partition -> first late offset

    @classmethod
    def of(cls, settings: Settings, generations: Sequence[Generation],
           closed: Mapping[str, Mapping[int, int]] | None = None) -> CommandTopics:
        """Return the topics of ``generations`` (generation 0 first), with ``settings`` overlaid for each."""
        from app.rescale.generation import overlay

        return cls({g.topic: g.number for g in generations}, {g.topic: overlay(settings, g) for g in generations},
                   dict(closed or {}))

    @classmethod
    def read(cls, settings: Settings) -> CommandTopics:
        """Return every generation's topics, as the generations topic (signed records only) lists them, with where
        each closed one's validator stopped (its checkpoint's last committed offsets)."""
        from app.rescale.generation import every
        from app.rescale.late import closed_offsets

        gens = every(settings)
        ends = {g.topic: closed_offsets(g.checkpoint, g.topic) for g in gens[:-1]}
        for topic in (t for t, e in ends.items() if e is None):
            log.warning("%s: its generation's checkpoint holds no offsets; its records are all re-decided, none "
                        "taken as written after it closed", topic)
        return cls.of(settings, gens, {t: e for t, e in ends.items() if e is not None})

    @classmethod
    def single(cls, settings: Settings) -> CommandTopics:
        """Return generation 0 alone: the settings' commands topic (never rescaled)."""
        from app.rescale.generation import first

        return cls.of(settings, [first(settings)])

    @property
    def names(self) -> tuple[str, ...]:
        """Return the topics, generation 0's first."""
        return tuple(sorted(self.numbers, key=self.numbers.__getitem__))

    def number(self, topic: str) -> int:
        """Return the generation ``topic`` belongs to (``KeyError`` for a topic that is none of them)."""
        return self.numbers[topic]

    def settings(self, topic: str) -> Settings:
        """Return the settings generation ``topic``'s validator decided with."""
        return self.settings_by_topic[topic]

    def position(self, topic: str, partition: int, offset: int) -> tuple[int, int, int]:
        """Return the sort key of a record: (generation, partition, offset); a generation's records all come first."""
        return self.numbers[topic], partition, offset

    def late(self, topic: str, partition: int, offset: int) -> str | None:
        """Return the topic that replaced ``topic`` if the record at ``partition``/``offset`` arrived after its
        generation was closed (its validator never decided it), else None."""
        ends = self.closed.get(topic)
        if ends is None or offset < ends.get(partition, 0):
            return None
        return next(t for t in self.names if self.numbers[t] > self.numbers[topic])

    def for_tasks(self) -> CommandTopics:
        """Return these topics with each generation's settings stripped of secrets (``Settings.for_tasks``)."""
        return CommandTopics(dict(self.numbers), {t: s.for_tasks() for t, s in self.settings_by_topic.items()},
                             self.closed)
