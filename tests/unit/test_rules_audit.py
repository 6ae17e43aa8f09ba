"""Rules deploys in the audit trail: the placement record's wire format, the catalog ignores it as a claim, the audit
projection neither counts deploy records as undecodable nor loses them, and ``audit show`` names who deployed which
version, its digest and the control record's offset on each partition."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.rules.catalog import winners
from app.rules.control import (
    CONTROL_HEADER,
    CONTROL_KEY,
    ControlInvalid,
    Deploy,
    Placed,
    claim_headers,
    decode_placed,
    encode_control,
    encode_placed,
    placed_headers,
)
from app.settings import Settings
from app.validator.topic_io import Record
from commands import CreateObject, decide
from commands.rules import canonical_rules, rules_digest
from projections.audit import AuditProjection, history
from projections.audit.deploys import RULES_OBJECT, catalog_record, decode_audited
from projections.runner import Item
from projections.runner import Record as RunnerRecord
from schemas import codec
from schemas.codec import DecodeError

pytestmark = pytest.mark.unit

S = Settings()
T0 = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
DOC = canonical_rules('{"rules": 1, "types": {}}')
CLAIM = Deploy(1, rules_digest(DOC), DOC, "ops:alice", T0, "https://issuer.example")
PLACED = Placed(1, CLAIM.digest, "ops:alice", T0, "commands", {2: 0, 0: 17, 3: 9, 1: 4})


def test_a_placement_round_trips_canonically_and_malformed_ones_are_named() -> None:
    value = encode_placed(PLACED)
    assert decode_placed(value) == PLACED and encode_placed(decode_placed(value)) == value
    assert encode_placed(replace(PLACED, offsets=dict(sorted(PLACED.offsets.items())))) == value  # canonical
    for bad in (b"[]", b"{", value.replace(b'"0":17', b'"0":-1'), value.replace(b'"0":17', b'"x":17'),
                value.replace(b'"version":1', b'"version":0'), encode_control(CLAIM)):
        with pytest.raises(ControlInvalid):
            decode_placed(bad)


def test_the_catalog_never_takes_a_placement_for_a_claim() -> None:
    claim, placed = encode_control(CLAIM), encode_placed(PLACED)
    records = [Record(S.rules_topic, 0, 0, CONTROL_KEY, claim, tuple(claim_headers(S, claim))),
               Record(S.rules_topic, 0, 1, CONTROL_KEY, placed, tuple(placed_headers(S, placed)))]
    assert winners(records, S) == [CLAIM]
    marked = [records[0], Record(S.rules_topic, 0, 1, CONTROL_KEY, placed, tuple(claim_headers(S, placed)))]
    assert winners(marked, S) == [CLAIM]  # even marked as a claim, its value is not one
    assert dict(records[1].headers)[CONTROL_HEADER] != dict(records[0].headers)[CONTROL_HEADER]


def test_deploy_records_decode_to_no_decision_and_anything_else_still_fails() -> None:
    assert catalog_record(encode_control(CLAIM)) == CLAIM and catalog_record(encode_placed(PLACED)) == PLACED
    assert decode_audited(encode_control(CLAIM)) is None and decode_audited(encode_placed(PLACED)) is None
    event = decide(None, CreateObject("c", "o", "alice", T0, document="{}")).outcome
    assert decode_audited(codec.encode_event(event)) == event  # type: ignore[arg-type]
    for junk in (b'{"not": "a deploy"}', b"\x00\x00\x00\x00\x63garbage"):
        assert catalog_record(junk) is None
        with pytest.raises(DecodeError):
            decode_audited(junk)


def test_audit_show_names_who_deployed_which_version_its_digest_and_each_partitions_offset(tmp_path: Path) -> None:
    path = tmp_path / "audit"
    proj = AuditProjection(path, sync=False)
    claim, placed = encode_control(CLAIM), encode_placed(PLACED)
    proj.apply([Item(RunnerRecord(S.rules_topic, 0, i, CONTROL_KEY, v, 0), decode_audited(v))
                for i, v in enumerate((claim, placed))])
    proj.close()
    deployed, where = history(path, RULES_OBJECT)
    assert (deployed.outcome, deployed.version, deployed.principal, deployed.occurred_at) == ("DEPLOYED", 1,
                                                                                               "ops:alice", T0)
    assert CLAIM.digest in deployed.detail and deployed.issuer == "https://issuer.example"
    assert (where.outcome, where.version, where.principal) == ("PLACED", 1, "ops:alice")
    assert "commands[0]@17 commands[1]@4 commands[2]@0 commands[3]@9" in where.detail and CLAIM.digest in where.detail
    assert "DEPLOYED" in str(deployed) and "deployed_by=ops:alice" in str(deployed) and "v1" in str(deployed)


def test_audit_show_marks_the_claims_that_never_became_a_version(tmp_path: Path) -> None:
    path = tmp_path / "audit"
    claims = [replace(CLAIM, version=v, principal=who, deployed_at=T0 + timedelta(minutes=n))
              for n, (v, who) in enumerate([(1, "alice"), (2, "bob"), (2, "carol"), (4, "mallory"), (3, "dave")])]
    proj = AuditProjection(path, sync=False)
    proj.apply([Item(RunnerRecord(S.rules_topic, 0, i, CONTROL_KEY, encode_control(c), 0), None)
                for i, c in enumerate(claims)])
    proj.close()
    shown = [(h.principal, h.outcome) for h in history(path, RULES_OBJECT)]
    assert shown == [("alice", "DEPLOYED"), ("bob", "DEPLOYED"), ("carol", "CLAIM-LOST"), ("mallory", "CLAIM-LOST"),
                     ("dave", "DEPLOYED")]  # what app.rules.catalog.winners reads from the same records
    won = winners([Record(S.rules_topic, 0, i, CONTROL_KEY, encode_control(c), tuple(claim_headers(
        S, encode_control(c)))) for i, c in enumerate(claims)], S)
    assert [d.principal for d in won] == [who for who, outcome in shown if outcome == "DEPLOYED"]
