"""A parked record keeps what its signature was, and a redrive never re-signs a forgery as genuine (issue 35, item 3):
the validator's own decode, fold and park, the parking lot's ledger and redrive, no broker."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from app.parked.lot import Ledger, ParkedNotGenuine, redrive_record, signature_state
from app.settings import Settings
from app.signing import signer_for
from app.validator.fold import InputRecord, fold
from app.validator.murmur2 import partition_for
from commands import CreateObject, Event, EventType, GrantReader, ReasonCode, Rejection, decide
from schemas import codec, parked

pytestmark = pytest.mark.unit

AT = datetime(2025, 1, 1, tzinfo=UTC)
S = Settings(partitions=1, topic_events="ev", topic_rejections="rj", topic_commands="cmd",
             record_keys={"k1": SecretStr("k" * 32)})
#: the forger's key: same key id, a secret the validator does not hold
FORGER = Settings(partitions=1, record_keys={"k1": SecretStr("f" * 32)})
#: "alice grants mallory reader", written by someone who is not alice (nor Arbiter)
GRANT = GrantReader("forged-1", "doc", "alice", AT, reader="mallory")
ALICE_OWNS_DOC = decide(None, CreateObject("c1", "doc", "alice", AT, document="{}")).state


def _parked_from(records: list[InputRecord]) -> list[parked.Parked]:
    copies: list = []
    out, _, _ = fold(lambda: ALICE_OWNS_DOC, records, S, parked=copies)
    assert all(isinstance(codec.decode_outcome(o[2]), Rejection) for o in out)
    return [parked.decode(c[2]) for c in copies]


def _entry(p: parked.Parked):  # noqa: ANN202 - the ledger's entry
    ledger = Ledger()
    ledger.add_parked(p.partition, 10, parked.encode(p))
    return ledger.entries[p.where]


def test_a_forged_record_with_a_wrong_key_is_parked_with_its_signature_invalid_and_redrive_refuses_it() -> None:
    value = codec.encode_command(GRANT)
    wrong_key = b"not-doc"  # the key/object-id check rejects it MALFORMED: parked
    forged = signer_for(FORGER).sign(wrong_key, value)
    assert forged.startswith(b"k1:")  # a known key id: only the MAC gives it away
    (p,) = _parked_from([InputRecord(wrong_key, value, "cmd", 0, 5, forged)])
    assert (p.reason, p.signature, p.signature_state) == ("MALFORMED", forged, "invalid")
    entry = _entry(p)
    checker = signer_for(S)
    assert signature_state(entry.record, checker) == "invalid"
    with pytest.raises(ParkedNotGenuine):
        redrive_record(entry, None, checker)
    # The forged bytes under their own signature, on the right key, are not accepted either: only a redrive (which
    # signs what it sends) could have made this grant genuine.
    out, state, _ = fold(lambda: ALICE_OWNS_DOC, [InputRecord(b"doc", value, "cmd", partition_for(b"doc", 1), 6,
                                                              signer_for(FORGER).sign(b"doc", value))], S)
    rejection = codec.decode_outcome(out[0][2])
    assert isinstance(rejection, Rejection) and rejection.reason is ReasonCode.UNAUTHENTICATED and state is None
    # What the operator supplies is theirs to vouch for: --value-file goes through (and is logged as fixed).
    key, sent, _ = redrive_record(entry, value, checker)
    assert key == b"doc" and codec.decode_command(sent).principal == "alice"


def test_an_unsigned_record_is_parked_absent_and_a_genuine_one_valid_and_redriven() -> None:
    value = codec.encode_command(GRANT)
    checker = signer_for(S)
    absent, valid = _parked_from([InputRecord(b"not-doc", value, "cmd", 0, 1, None),
                                  InputRecord(b"not-doc", value, "cmd", 0, 2, checker.sign(b"not-doc", value))])
    assert (absent.signature_state, valid.signature_state) == ("absent", "valid")
    with pytest.raises(ParkedNotGenuine):
        redrive_record(_entry(absent), None, checker)
    # a genuine record (Arbiter's own bytes, under a key it trusts) is redriven as parked, and then decided
    key, sent, command_id = redrive_record(_entry(valid), None, checker)
    out, _, changed = fold(lambda: ALICE_OWNS_DOC, [InputRecord(key, sent, "cmd", 0, 3, checker.sign(key, sent))], S)
    event = codec.decode_outcome(out[0][2])
    assert changed and isinstance(event, Event) and event.type is EventType.READER_GRANTED
    assert event.command_id == command_id


def test_a_record_parked_before_its_signature_was_recorded_is_checked_against_the_keys_trusted_now() -> None:
    value = codec.encode_command(GRANT)
    checker = signer_for(S)
    old = parked.Parked("cmd", 0, 7, "MALFORMED", "rid", b"not-doc", None, value)
    v1 = parked.MAGIC_V1 + parked.encode(old)[len(parked.MAGIC):].replace(b"\x09unchecked", b"", 1)
    assert parked.decode(v1) == old and old.signature_state == "unchecked"
    for signature, state in ((None, "absent"), (signer_for(FORGER).sign(b"not-doc", value), "invalid"),
                             (checker.sign(b"not-doc", value), "valid")):
        assert signature_state(parked.Parked("cmd", 0, 7, "MALFORMED", "rid", b"not-doc", signature, value),
                               checker) == state
    # parked while unsigned producers were allowed: recorded as unchecked, checked now
    allow = S.model_copy(update={"allow_unsigned_commands": True})
    copies: list = []
    fold(lambda: None, [InputRecord(b"not-doc", value, "cmd", 0, 8, signer_for(FORGER).sign(b"not-doc", value))],
         allow, parked=copies)
    (p,) = [parked.decode(c[2]) for c in copies]
    assert p.signature_state == "unchecked" and signature_state(p, checker) == "invalid"
    with pytest.raises(parked.ParkedFormatError):
        parked.decode(parked.encode(old).replace(b"\x09unchecked", b"\x07genuine"))


def test_redriving_a_genuine_copy_of_a_decided_command_keeps_its_id_so_it_is_a_duplicate() -> None:
    """Issue 47, finding 9: a verbatim copy of alice's grant, written to a partition it does not belong to (a closed
    generation's, say), is parked as genuine; redriven, it keeps its command id, so the dedup window answers it
    DUPLICATE instead of granting again what alice revoked since."""
    from app.rescale.late import late_outputs
    from commands import RevokeReader

    checker = signer_for(S)
    grant = GrantReader("g-1", "doc", "alice", AT, reader="mallory")
    value = codec.encode_command(grant)
    rejection, copy = late_outputs(b"doc", value, checker.sign(b"doc", value), "cmd", 0, 8, S, "cmd.g1")
    assert codec.decode_outcome(rejection[2]).reason is ReasonCode.MISROUTED
    p = parked.decode(copy[2])
    assert p.signature_state == "valid"
    state = decide(ALICE_OWNS_DOC, grant).state
    state = decide(state, RevokeReader("r-1", "doc", "alice", AT, reader="mallory")).state
    key, sent, command_id = redrive_record(_entry(p), None, checker)
    assert command_id == "g-1" and codec.decode_command(sent).command_id == "g-1"
    out, _, changed = fold(lambda: state, [InputRecord(key, sent, "cmd", 0, 9, checker.sign(key, sent))], S)
    outcome = codec.decode_outcome(out[0][2])
    assert not changed and isinstance(outcome, Rejection) and outcome.reason is ReasonCode.DUPLICATE
    # a fixed value is the operator's new command: it gets the redrive's own id, the same on every redrive
    _, _, fixed_id = redrive_record(_entry(p), value, checker)
    assert fixed_id != "g-1" and fixed_id == redrive_record(_entry(p), value, checker)[2]
