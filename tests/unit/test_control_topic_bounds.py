"""What junk on the rules catalog and the generations topic can cost the API (issue 47, "Also"): each record is
folded once, a record over the size bound is skipped unread, and every skipped record is counted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

import app.rescale.generation as gen
import app.rules.catalog as catalog
from app.rescale.generation import GenerationWatch
from app.rules.catalog import CatalogFold, follow, max_claim_bytes, winners
from app.rules.control import CONTROL_KEY, Deploy, claim_headers, encode_control
from app.settings import Settings
from app.validator.topic_io import Record
from commands.rules import canonical_rules, rules_digest
from schemas.generations import KEY

pytestmark = pytest.mark.unit

S = Settings(topic_commands="cmds", partitions=4, var_dir="/tmp/x-var")  # type: ignore[arg-type]
T0 = datetime(2026, 11, 27, tzinfo=UTC)
DOC = canonical_rules('{"rules": 1, "types": {}}')


class Served:
    """A one-partition topic in memory that counts the records each read hands out."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.records: list[Record] = []
        self.served = 0

    def append(self, key: bytes, value: bytes, headers: tuple[tuple[str, bytes], ...] = ()) -> None:
        self.records.append(Record(self.name, 0, len(self.records), key, value, headers))

    def read_all(self, settings: Settings, topic: str, timeout: float = 30, since: int = 0) -> list[Record]:
        out = [r for r in self.records if r.offset >= since]
        self.served += len(out)
        return out


@pytest.fixture
def generations(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    t = Served(S.generations_topic)
    monkeypatch.setattr(gen, "read_all", t.read_all)
    yield t


@pytest.fixture
def rules_topic(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    t = Served(S.rules_topic)
    monkeypatch.setattr(catalog, "read_all", t.read_all)
    admin = SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(topics={S.rules_topic: object()}))
    monkeypatch.setattr("confluent_kafka.admin.AdminClient", lambda conf: admin)
    yield t


def test_the_watch_folds_each_generation_record_once_and_counts_what_it_skips(generations: Served) -> None:
    skipped: list[int] = []
    watch = GenerationWatch(S, on_skip=lambda r, why: skipped.append(r.offset))
    for n in range(50):
        generations.append(KEY, b"junk %d" % n)
    watch.tick(len(generations.records))
    assert generations.served == 50 and skipped == list(range(50))
    generations.append(KEY, b"one more")
    watch.tick(len(generations.records))
    watch.tick(len(generations.records))  # the end did not move: nothing is read
    assert generations.served == 51 and skipped == list(range(51))
    assert watch.generation.number == 0


def test_the_api_reads_the_catalog_from_where_it_stopped(rules_topic: Served) -> None:
    skipped: list[str] = []
    fold = CatalogFold(S, on_skip=lambda r, why: skipped.append(why))
    value = encode_control(Deploy(1, rules_digest(DOC), DOC, "ops", T0))
    rules_topic.append(CONTROL_KEY, value, tuple(claim_headers(S, value)))
    for n in range(20):
        rules_topic.append(CONTROL_KEY, b"junk %d" % n)
    assert [d.version for d in follow(S, fold).versions] == [1] and rules_topic.served == 21
    rules_topic.append(CONTROL_KEY, b"junk")
    assert [d.version for d in follow(S, fold).versions] == [1] and rules_topic.served == 22
    assert len(skipped) == 21 == fold.skipped


def _claim_of(size: int) -> bytes:
    """A well-formed claim of version 1 whose value is exactly ``size`` bytes (its principal padded)."""
    base = len(encode_control(Deploy(1, rules_digest(DOC), DOC, "", T0)))
    value = encode_control(Deploy(1, rules_digest(DOC), DOC, "p" * (size - base), T0))
    assert len(value) == size
    return value


@pytest.mark.parametrize(("extra", "counts"), [(0, True), (1, False)])
def test_a_claim_over_the_largest_a_deploy_writes_is_skipped_unread(extra: int, counts: bool) -> None:
    value = _claim_of(max_claim_bytes(S) + extra)
    won = winners([Record(S.rules_topic, 0, 0, CONTROL_KEY, value, tuple(claim_headers(S, value)))], S)
    assert (len(won) == 1) is counts


def test_claims_signed_as_commands_before_the_upgrade_number_versions_until_the_first_claim_signed_as_one() -> None:
    """An in-place upgrade keeps its catalog: claims written before claims had their own signing domain still count,
    but none does once a deploy on the new code has claimed a version."""
    from app.rules.control import CONTROL_HEADER, RULES_CONTROL
    from app.signing import signer_for

    def claim(version: int, *, legacy: bool) -> Record:
        value = encode_control(Deploy(version, rules_digest(DOC), DOC, f"ops-{version}", T0))
        headers = [(CONTROL_HEADER, RULES_CONTROL), *signer_for(S).headers(CONTROL_KEY, value)] if legacy \
            else claim_headers(S, value)
        return Record(S.rules_topic, 0, version, CONTROL_KEY, value, tuple(headers))

    before = [claim(1, legacy=True), claim(2, legacy=True)]
    assert [d.version for d in winners(before, S)] == [1, 2]
    after = [*before, claim(3, legacy=False), claim(4, legacy=True)]
    assert [d.version for d in winners(after, S)] == [1, 2, 3]
