"""The one fold of the generations topic: which of its records count, so every reader agrees on the current generation.

The API, the validator, ``arbiter rescale``, the status page and ``arbiter verify`` all read the generations topic
through ``GenerationChain`` (``app.rescale.generation``). A record counts only if

- its key is ``arbiter:generation`` and its value at most ``MAX_GENERATION_BYTES``;
- it is signed as a generation record (``app.signing.GENERATION_DOMAIN``), never as a command: a user's command
  keyed ``arbiter:generation`` is not one. Records from before that domain existed were signed as commands
  (``LEGACY_DOMAIN``); they count only before the first record signed as a generation record (an in-place upgrade
  keeps its history; docs/operations/upgrading.md);
- it parses as a generation record (anything else is skipped and logged, never raised);
- it names the digest of the last record that counted (``previous``; legacy records have none), so a byte-for-byte
  copy of an old record, whose ``previous`` is not the head any more, is refused;
- it advances: the next generation (number + 1, writes not paused), or the same generation going from writes open
  to writes paused (a rescale's pause). So even a legacy record cannot pause writes again or roll the pipeline back.

Each record is folded once: a follower (``GenerationWatch``) keeps its chain and reads only what was appended since.
"""

from __future__ import annotations

import hashlib

from app.settings import Settings
from app.signing import GENERATION_DOMAIN, LEGACY_DOMAIN, control_checker_for, signature_of, signer_for
from app.validator.topic_io import OnSkip, Record, TopicFold
from schemas.generations import KEY, Generation, generation_record

#: The largest value a generation record may have (one is ~300 bytes): larger ones are skipped unread.
MAX_GENERATION_BYTES = 4096


def record_digest(value: bytes) -> str:
    """Return the digest the next generation record names as its ``previous``: ``sha256:<hex>`` of ``value``."""
    return "sha256:" + hashlib.sha256(value).hexdigest()


class GenerationChain(TopicFold):
    """The generation records that count so far, oldest first, and where the fold is on the topic."""

    what = "generation record"

    def __init__(self, settings: Settings, origin: Generation, on_skip: OnSkip | None = None) -> None:
        super().__init__(on_skip)
        self.checker = control_checker_for(settings, GENERATION_DOMAIN)
        self.legacy = signer_for(settings, LEGACY_DOMAIN)
        self.origin = origin  # generation 0, what the settings name: current before any record counts
        self.records: list[Generation] = []
        self.head = ""  # the digest of the last record that counted ("" before any)
        self.upgraded = False  # a record signed as a generation record counted: legacy ones no longer do

    @property
    def current(self) -> Generation:
        """Return the current generation: the last record that counted, or generation 0."""
        return self.records[-1] if self.records else self.origin

    def add(self, record: Record) -> Generation | None:
        """Fold one record; return its generation if it counts, else None (skipped, logged, counted)."""
        self.seen(record)
        try:
            generation, why = self._check(record)
        except Exception as e:  # noqa: BLE001 - a record is data: whatever it holds, the fold goes on
            generation, why = None, f"unreadable: {type(e).__name__}: {e}"
        if generation is None:
            self.skip(record, why)
            return None
        assert record.value is not None  # _check refuses a record without one
        self.records.append(generation)
        self.head = record_digest(record.value)
        return generation

    def _check(self, record: Record) -> tuple[Generation | None, str]:
        value = record.value
        if record.key != KEY or not value:
            return None, f"its key is not {KEY.decode()!r} or it has no value"
        if len(value) > MAX_GENERATION_BYTES:
            return None, f"{len(value)} bytes, over the {MAX_GENERATION_BYTES} a generation record may hold"
        signature = signature_of(record.headers)
        legacy = False
        problem = self.checker.problem(record.key, value, signature)
        if problem is not None:
            if self.upgraded or self.legacy.problem(record.key, value, signature) is not None:
                return None, f"not signed as a generation record ({problem})"
            legacy = True  # signed as a command, before the first record signed as a generation record
        generation = generation_record(value)
        if generation is None:
            return None, "its value is not a generation record"
        if not legacy and generation.previous != self.head:
            return None, (f"it follows {generation.previous or 'nothing'}, not the last generation record "
                          f"({self.head or 'none yet'}): a copy of an older record")
        last = self.current
        if not (generation.number == last.number + 1 and not generation.paused) and \
                not (generation.number == last.number and generation.paused and not last.paused):
            return None, (f"generation {generation.number}{' (paused)' if generation.paused else ''} does not "
                          f"advance from {last.number}{' (paused)' if last.paused else ''}")
        if not legacy:
            self.upgraded = True
        return generation, ""
