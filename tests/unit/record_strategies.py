"""Hypothesis strategies for every record the codecs carry, built over the caller's texts, times and longs.

The codec tests keep values inside what any Avro reader accepts; the compiled-codec tests push to the edges
(year 1 to 9999, the full long range, long strings and lists). One builder, two sets of bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from hypothesis import strategies as st

from commands import (
    CreateObject,
    DeleteObject,
    Event,
    EventType,
    GrantEditor,
    GrantReader,
    ObjectState,
    OriginalRecord,
    ReasonCode,
    RecentCommand,
    Rejection,
    RevokeEditor,
    RevokeReader,
    RuleWarning,
    UpdateObject,
)

Strategy = st.SearchStrategy[Any]


@dataclass(frozen=True)
class RecordStrategies:
    """One strategy per record type."""

    commands: Strategy
    events: Strategy
    recents: Strategy
    states: Strategy
    rejections: Strategy


def record_strategies(texts: Strategy, times: st.SearchStrategy[datetime], longs: st.SearchStrategy[int], *,
                      max_editors: int, max_recent: int) -> RecordStrategies:
    """Return strategies for commands, events, dedup entries, states and rejections over the given values."""
    opt_longs = st.none() | longs
    common = (texts, texts, texts, times, opt_longs)
    commands = st.one_of(
        st.builds(CreateObject, *common, document=texts, object_type=st.none() | texts),
        st.builds(UpdateObject, *common, patch=texts),
        st.builds(DeleteObject, *common),
        st.builds(GrantEditor, *common, editor=texts),
        st.builds(RevokeEditor, *common, editor=texts),
        st.builds(GrantReader, *common, reader=texts),
        st.builds(RevokeReader, *common, reader=texts),
    )
    events = st.builds(Event, texts, st.sampled_from(EventType), texts, longs, texts, texts, times, texts,
                       st.none() | texts, st.none() | texts, st.none() | texts, st.none() | texts,
                       st.none() | texts, st.none() | texts, st.none() | texts, opt_longs,
                       st.lists(st.builds(RuleWarning, texts, texts, texts, texts,
                                          st.lists(texts, max_size=3).map(tuple)), max_size=3).map(tuple))
    # "" and 0 stand for "none" in a stored window (schemas.records), so entries use None for them.
    recents = st.builds(RecentCommand, texts, texts, longs, times, st.none() | texts.filter(bool),
                        st.none() | longs.filter(bool))
    states = st.builds(ObjectState, st.booleans(), st.booleans(), longs, texts,
                       st.lists(texts, max_size=max_editors).map(tuple), st.none() | times, st.none() | times,
                       st.none() | times, longs, st.lists(recents, max_size=max_recent).map(tuple),
                       st.lists(texts, max_size=max_editors).map(tuple), st.none() | texts, st.none() | texts)
    originals = st.builds(OriginalRecord, texts, st.integers(0, 2**31 - 1), longs, st.none() | st.binary(),
                          st.none() | st.binary(), opt_longs, opt_longs, st.none() | texts, st.none() | texts)
    rejections = st.builds(Rejection, texts, st.sampled_from(ReasonCode), texts, st.none() | texts,
                           st.none() | texts, st.none() | texts, st.none() | times, opt_longs, st.none() | texts,
                           opt_longs, st.none() | originals, st.none() | texts, st.none() | texts, opt_longs,
                           st.none() | texts, st.none() | texts, st.lists(texts, max_size=3).map(tuple))
    return RecordStrategies(commands, events, recents, states, rejections)


@cache
def _default_settings() -> Any:  # noqa: ANN401 - app.settings.Settings, imported late as the signers below do
    """Every test's ``Settings()`` (tests/conftest.py drops the caller's ``ARBITER_*``), built once: a ``Settings()``
    reads the environment and the dotenv file, and the signers below built one per record (most of the time of
    tests/unit/test_rocks_shard.py's generated streams, in a py-spy profile of the fast tier)."""
    from app.settings import Settings

    return Settings()


def signature(key: bytes | None, value: bytes) -> bytes:
    """The ``arbiter-signature`` header Arbiter's producers put on a command record, under the settings' default
    (development) key, as every test's ``Settings`` without ``record_keys`` has it (``app.signing``)."""
    from app.signing import signer_for

    return signer_for(_default_settings()).sign(key, value)


def control_signature(key: bytes | None, value: bytes) -> bytes:
    """The ``arbiter-signature`` header of a rules control record (signed in its own domain, ``app.signing``)."""
    from app.signing import CONTROL_DOMAIN, signer_for

    return signer_for(_default_settings(), CONTROL_DOMAIN).sign(key, value)
