"""What the validator must write, computed by folding ``commands.decide`` directly; shared by the validator tests."""

from __future__ import annotations

from app.settings import Settings
from app.validator.fold import limits_for
from app.validator.murmur2 import partition_for
from app.validator.topic_io import produce, read_all
from commands import Command, Event, ObjectState, decide
from schemas import codec

Out = tuple[str, bytes | None, bytes | None, int]


def expected_outputs(commands: list[Command], settings: Settings,
                     states: dict[str, ObjectState | None] | None = None) -> list[Out]:
    """Fold ``commands`` through ``decide`` per object (``states`` carries on across calls) and encode the outputs."""
    states = {} if states is None else states
    limits = limits_for(settings)
    out: list[Out] = []
    for cmd in commands:
        d = decide(states.get(cmd.object_id), cmd, limits)
        states[cmd.object_id] = d.state
        key = cmd.object_id.encode()
        part = partition_for(key, settings.partitions)
        if isinstance(d.outcome, Event):
            out.append((settings.topic_events, key, codec.encode_event(d.outcome), part))
        else:
            out.append((settings.topic_rejections, key, codec.encode_rejection(d.outcome), part))
    return out


def topic_outputs(settings: Settings) -> list[Out]:
    """Everything on the events and rejections topics, as (topic, key, value, partition)."""
    return [(r.topic, r.key, r.value, r.partition) for t in (settings.topic_events, settings.topic_rejections)
            for r in read_all(settings, t)]


def send_commands(settings: Settings, commands: list[Command]) -> None:
    """Put ``commands`` on the commands topic, keyed by object id."""
    produce(settings, [(c.object_id.encode(), codec.encode_command(c)) for c in commands])
