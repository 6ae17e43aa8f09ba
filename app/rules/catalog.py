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
from app.validator.topic_io import Record, read_all

CLAIM_KEY = CONTROL_KEY


def ensure_rules_topic(settings: Settings) -> None:
    """Create the catalog topic if missing: one partition, never deleted by retention (it numbers the versions)."""
    from app.topics import ensure_history_topic

    ensure_history_topic(settings, settings.rules_topic, "rules catalog topic")


def winners(records: Iterable[Record], settings: Settings) -> list[Deploy]:
    """Return the deployed versions, oldest first: per version, the first genuine claim of ``previous + 1``.

    A claim that is unsigned (whatever ``ARBITER_ALLOW_UNSIGNED_COMMANDS`` says), forged, malformed, or not exactly
    one above the last winner is ignored: it lost a race (or was never Arbiter's). One signed as a command counts
    only before the first one signed as a claim (the module's docstring).
    """
    checker, legacy = signer_for(settings, CLAIM_DOMAIN), signer_for(settings, LEGACY_DOMAIN)
    upgraded = False
    out: list[Deploy] = []
    for r in records:
        headers = dict(r.headers)
        if not is_control(headers.get(CONTROL_HEADER)) or r.key != CLAIM_KEY:
            continue
        signature = signature_of(r.headers)
        if checker.problem(r.key, r.value or b"", signature) is None:
            upgraded = True
        elif upgraded or legacy.problem(r.key, r.value or b"", signature) is not None:
            continue
        try:
            claim = decode_control(r.value)
        except ControlInvalid:
            continue
        if claim.version == (out[-1].version if out else 0) + 1:
            out.append(claim)
    return out


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


def deployed(settings: Settings) -> list[Deploy]:
    """Return every deployed version from the catalog topic, oldest first (empty when none, or no topic yet)."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": settings.kafka_bootstrap, "log_level": 0}).list_topics(timeout=10)
    if settings.rules_topic not in meta.topics:
        return []
    return winners(read_all(settings, settings.rules_topic), settings)


def current(settings: Settings) -> Deploy | None:
    """Return the newest deployed version, or None."""
    versions = deployed(settings)
    return versions[-1] if versions else None
