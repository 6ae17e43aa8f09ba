"""The catalog of deployed rules versions: a one-partition topic of signed claims, one per deploy, oldest first.

Why a catalog beside the control records: the commands topic has many partitions and no order between them, so
two deploys racing for the same next version could reach partitions in different orders. Every deploy first
claims ``version`` on this single partition; the first claim of ``current + 1`` wins, and only the winner writes
control records. The catalog also answers "which version is next" and "what is the newest rules document" (for
``GET /rules`` and the API's advisory pre-check) without reading the commands topic. The validator never reads it:
its rules switch only at the control records, in offset order.

A claim is signed in the claim domain (``app.signing.CLAIM_DOMAIN``). Claims from before that domain existed were
signed as commands (``LEGACY_DOMAIN``): they still count, but only before the first claim signed as a claim, so an
in-place upgrade keeps its versions and nothing signed as a command counts once a deploy ran on the new code.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.limits import size_limits
from app.rules.control import (
    CONTROL_HEADER,
    CONTROL_KEY,
    RULES_PLACED,
    ControlInvalid,
    Deploy,
    decode_control,
    decode_placed,
    is_control,
)
from app.settings import Settings
from app.signing import CLAIM_DOMAIN, LEGACY_DOMAIN, PLACED_DOMAIN, signature_of, signer_for
from app.validator.topic_io import OnSkip, Record, TopicFold, read_all

CLAIM_KEY = CONTROL_KEY


def ensure_rules_topic(settings: Settings) -> None:
    """Create the catalog topic if missing: one partition, never deleted by retention (it numbers the versions)."""
    from app.topics import ensure_history_topic

    ensure_history_topic(settings, settings.rules_topic, "rules catalog topic")


class CatalogFold(TopicFold):
    """The catalog folded so far: the deployed versions, where the fold is on the topic, how many records it skipped.

    Each record is folded once: the API keeps one and reads only what was appended since (``follow``), so junk on
    the catalog costs each record once, and a record over the largest claim a deploy writes is skipped unread.
    """

    what = "catalog record"

    def __init__(self, settings: Settings, on_skip: OnSkip | None = None) -> None:
        super().__init__(on_skip)
        self.checker = signer_for(settings, CLAIM_DOMAIN)
        self.legacy = signer_for(settings, LEGACY_DOMAIN)
        self.max_bytes = max_claim_bytes(settings)
        self.versions: list[Deploy] = []
        self.upgraded = False  # a claim signed as a claim was seen: claims signed as commands no longer count

    def add(self, r: Record) -> Deploy | None:
        """Fold one record; return the version it deployed, or None (a placement, a lost claim, or skipped)."""
        self.seen(r)
        marker = dict(r.headers).get(CONTROL_HEADER)
        if r.key == CLAIM_KEY and marker is not None and bytes(marker) == RULES_PLACED:
            return None  # a placement: ``placed_versions`` reads those
        claim, why = self._claim(r, marker)
        if claim is None:
            self.skip(r, why)
            return None
        if claim.version != (self.versions[-1].version if self.versions else 0) + 1:
            return None  # a genuine claim that lost a race
        self.versions.append(claim)
        return claim

    def _claim(self, r: Record, marker: bytes | None) -> tuple[Deploy | None, str]:
        if not is_control(marker) or r.key != CLAIM_KEY:
            return None, "neither a claim nor a placement"
        value = r.value or b""
        if len(value) > self.max_bytes:
            return None, f"{len(value)} bytes, over the {self.max_bytes} of the largest claim a deploy writes"
        signature = signature_of(r.headers)
        if self.checker.problem(r.key, value, signature) is None:
            self.upgraded = True
        elif self.upgraded or self.legacy.problem(r.key, value, signature) is not None:
            return None, "not signed as a claim"
        try:
            return decode_control(value), ""
        except ControlInvalid as e:
            return None, str(e)


def max_claim_bytes(settings: Settings) -> int:
    """Return the size of the largest claim value a deploy writes (``app.rules.deploy`` refuses a larger one)."""
    return size_limits(settings.max_message_bytes).max_record_bytes - len(CONTROL_KEY)


def winners(records: Iterable[Record], settings: Settings) -> list[Deploy]:
    """Return the deployed versions, oldest first: per version, the first genuine claim of ``previous + 1``.

    A claim that is unsigned (whatever ``ARBITER_ALLOW_UNSIGNED_COMMANDS`` says), forged, malformed, or not exactly
    one above the last winner is ignored: it lost a race (or was never Arbiter's). One signed as a command counts
    only before the first one signed as a claim (the module's docstring).
    """
    return CatalogFold(settings).extend(records).versions


def placed_versions(records: Iterable[Record], settings: Settings) -> set[int]:
    """Return the versions whose control records were all written: a genuine placement record names each."""
    checker = signer_for(settings, PLACED_DOMAIN)
    out: set[int] = set()
    for r in records:
        if dict(r.headers).get(CONTROL_HEADER) != RULES_PLACED or r.key != CLAIM_KEY:
            continue
        if checker.problem(r.key, r.value or b"", signature_of(r.headers)) is not None:
            continue
        try:
            out.add(decode_placed(r.value).version)
        except ControlInvalid:
            continue
    return out


def follow(settings: Settings, fold: CatalogFold) -> CatalogFold:
    """Fold what was appended to the catalog topic since ``fold`` last read it (nothing when there is no topic yet)."""
    from confluent_kafka.admin import AdminClient

    # all topics, not this one by name: a request naming a missing topic may create it (auto.create.topics.enable)
    meta = AdminClient({"bootstrap.servers": settings.kafka_bootstrap, "log_level": 0}).list_topics(timeout=10)
    if settings.rules_topic not in meta.topics:
        return fold
    return fold.extend(r for r in read_all(settings, settings.rules_topic, since=fold.next_offset)
                       if r.offset >= fold.next_offset)


def deployed(settings: Settings) -> list[Deploy]:
    """Return every deployed version from the catalog topic, oldest first (empty when none, or no topic yet)."""
    return follow(settings, CatalogFold(settings)).versions


def current(settings: Settings) -> Deploy | None:
    """Return the newest deployed version, or None."""
    versions = deployed(settings)
    return versions[-1] if versions else None
