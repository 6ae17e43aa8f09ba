"""One test per decision rule and per reason code of ``commands.decide``."""

from __future__ import annotations

import io
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import fastavro
import pytest

from commands import (
    ARBITER_NAMESPACE,
    ArbiterError,
    CreateObject,
    DeleteObject,
    Event,
    EventType,
    GrantEditor,
    GrantReader,
    Limits,
    ObjectState,
    OriginalRecord,
    ReasonCode,
    Rejection,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    decide,
    reject_record,
)
from schemas import codec, records
from schemas.catalog import SchemaCatalog
from schemas.wire import header

pytestmark = pytest.mark.unit

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def created(owner: str = "alice", object_id: str = "o1") -> ObjectState:
    state = decide(None, CreateObject("c-create", object_id, owner, T0, document='{"a": 1}')).state
    assert state is not None
    return state


def rejected(state: ObjectState | None, cmd: object, limits: Limits | None = None) -> Rejection:
    decision = decide(state, cmd, limits) if limits else decide(state, cmd)  # type: ignore[arg-type]
    assert not decision.accepted
    assert decision.state is state
    assert isinstance(decision.outcome, Rejection)
    return decision.outcome


def test_create_gives_version_1_owned_by_sender() -> None:
    d = decide(None, CreateObject("c1", "o1", "alice", T0, document='{"a": 1}'))
    assert d.accepted and isinstance(d.outcome, Event)
    assert d.outcome.type is EventType.CREATED and d.outcome.version == 1 and d.outcome.owner == "alice"
    assert d.outcome.document == '{"a": 1}' and d.outcome.occurred_at == T0
    assert d.outcome.event_id == str(uuid.uuid5(ARBITER_NAMESPACE, "o1:1"))
    assert d.state is not None and d.state.version == 1 and d.state.document_size == 8


def test_update_delete_grant_revoke_each_raise_version_by_one() -> None:
    s = created()
    for i, (cmd, etype) in enumerate([
        (UpdateObject("u", "o1", "alice", at(1), patch='{"a": 2}'), EventType.UPDATED),
        (GrantEditor("g", "o1", "alice", at(2), editor="bob"), EventType.EDITOR_GRANTED),
        (RevokeEditor("r", "o1", "alice", at(3), editor="bob"), EventType.EDITOR_REVOKED),
        (DeleteObject("d", "o1", "alice", at(4)), EventType.DELETED),
    ], start=2):
        d = decide(s, cmd)
        assert isinstance(d.outcome, Event) and d.outcome.type is etype and d.outcome.version == i
        assert d.state is not None
        s = d.state
    assert s.deleted and s.deleted_at == at(4)


def test_already_exists() -> None:
    s = decide(created(), GrantReader("g", "o1", "alice", at(0.5), reader="bob")).state
    r = rejected(s, CreateObject("c2", "o1", "bob", at(1), document="{}"))
    assert r.reason is ReasonCode.ALREADY_EXISTS and r.current_version == 2


def test_an_outsiders_create_of_a_taken_id_reveals_no_version_and_no_deletion() -> None:
    """Issue 25: the outsider's ALREADY_EXISTS carried the real current_version (and the API its ETag), and a
    deleted object answered DELETED: now version 0 and the very same rejection bytes, live or deleted."""
    live = decide(created(), UpdateObject("u", "o1", "alice", at(1), patch='{"a": 2}')).state
    assert live is not None and live.version == 2
    gone = decide(live, DeleteObject("d", "o1", "alice", at(2))).state
    cmd = CreateObject("c-out", "o1", "mallory", at(3), document="{}")
    on_live, on_gone = rejected(live, cmd), rejected(gone, cmd)
    assert on_live.reason is ReasonCode.ALREADY_EXISTS and on_live.current_version == 0
    assert codec.encode_outcome(on_live) == codec.encode_outcome(on_gone)
    # the owner still learns the truth
    assert rejected(gone, CreateObject("c-own", "o1", "alice", at(3), document="{}")).reason is ReasonCode.DELETED


def test_create_on_deleted_object_is_deleted_ids_not_reused() -> None:
    s = decide(created(), DeleteObject("d", "o1", "alice", at(1))).state
    assert rejected(s, CreateObject("c2", "o1", "alice", at(2), document="{}")).reason is ReasonCode.DELETED


@pytest.mark.parametrize("cmd", [
    UpdateObject("u", "o1", "alice", T0, patch="{}"),
    DeleteObject("d", "o1", "alice", T0),
    GrantEditor("g", "o1", "alice", T0, editor="bob"),
    RevokeEditor("r", "o1", "alice", T0, editor="bob"),
])
def test_not_found_for_anything_but_create_on_unknown(cmd: object) -> None:
    assert rejected(None, cmd).reason is ReasonCode.NOT_FOUND


@pytest.mark.parametrize("cmd", [
    UpdateObject("u", "o1", "alice", at(5), patch="{}"),
    DeleteObject("d2", "o1", "alice", at(5)),
    GrantEditor("g", "o1", "alice", at(5), editor="bob"),
    RevokeEditor("r", "o1", "alice", at(5), editor="bob"),
])
def test_nothing_modifies_a_deleted_object(cmd: object) -> None:
    s = decide(created(), DeleteObject("d", "o1", "alice", at(1))).state
    assert rejected(s, cmd).reason is ReasonCode.DELETED


def test_version_conflict() -> None:
    r = rejected(created(), UpdateObject("u", "o1", "alice", at(1), expected_version=3, patch="{}"))
    assert r.reason is ReasonCode.VERSION_CONFLICT and r.current_version == 1
    assert decide(created(), UpdateObject("u", "o1", "alice", at(1), expected_version=1, patch="{}")).accepted


def test_create_with_expected_version_other_than_zero_conflicts() -> None:
    assert rejected(None, CreateObject("c", "o1", "a", T0, expected_version=1, document="{}")).reason \
        is ReasonCode.VERSION_CONFLICT
    assert decide(None, CreateObject("c", "o1", "a", T0, expected_version=0, document="{}")).accepted


@pytest.mark.parametrize("cmd", [
    DeleteObject("d", "o1", "bob", at(1)),
    GrantEditor("g", "o1", "bob", at(1), editor="carol"),
    RevokeEditor("r", "o1", "bob", at(1), editor="bob"),
    UpdateObject("u", "o1", "mallory", at(1), patch="{}"),
    GrantReader("gr", "o1", "bob", at(1), reader="carol"),
    RevokeReader("rr", "o1", "bob", at(1), reader="mallory"),
])
def test_forbidden_only_owner_shares_and_deletes_only_owner_and_editors_update(cmd: object) -> None:
    s = decide(created(), GrantEditor("g0", "o1", "alice", at(0.5), editor="bob")).state
    s = decide(s, GrantReader("g1", "o1", "alice", at(0.6), reader="mallory")).state
    assert rejected(s, cmd).reason is ReasonCode.FORBIDDEN


@pytest.mark.parametrize("cmd", [
    UpdateObject("u", "o1", "eve", at(1), patch="{}"),
    DeleteObject("d", "o1", "eve", at(1)),
    GrantEditor("g", "o1", "eve", at(1), editor="eve"),
    RevokeReader("r", "o1", "eve", at(1), reader="eve"),
])
@pytest.mark.parametrize("deleted", [False, True])
def test_an_outsider_is_told_not_found_exactly_as_for_an_unknown_id(cmd: object, deleted: bool) -> None:
    s = decide(created(), GrantEditor("g0", "o1", "alice", at(0.5), editor="bob")).state
    if deleted:
        s = decide(s, DeleteObject("d0", "o1", "alice", at(0.7))).state
    hidden = rejected(s, cmd)
    unknown = rejected(None, cmd)
    assert hidden.reason is ReasonCode.NOT_FOUND
    assert codec.encode_rejection(hidden) == codec.encode_rejection(unknown)


def test_a_deleted_object_keeps_its_roles_so_they_are_told_deleted() -> None:
    s = decide(created(), GrantEditor("g0", "o1", "alice", at(0.5), editor="bob")).state
    s = decide(s, GrantReader("g1", "o1", "alice", at(0.6), reader="carol")).state
    s = decide(s, DeleteObject("d0", "o1", "alice", at(0.7))).state
    assert s is not None and s.editors == ("bob",) and s.readers == ("carol",)
    assert rejected(s, UpdateObject("u", "o1", "bob", at(1), patch="{}")).reason is ReasonCode.DELETED
    assert rejected(s, UpdateObject("u", "o1", "carol", at(1), patch="{}")).reason is ReasonCode.FORBIDDEN


def test_reader_grant_and_revoke() -> None:
    s = created()
    d = decide(s, GrantReader("g", "o1", "alice", at(1), reader="bob"))
    assert isinstance(d.outcome, Event) and d.outcome.type is EventType.READER_GRANTED and d.outcome.reader == "bob"
    assert d.state is not None and d.state.readers == ("bob",)
    assert rejected(d.state, GrantReader("g2", "o1", "alice", at(2), reader="bob")).reason is ReasonCode.ALREADY_EXISTS
    assert rejected(d.state, GrantReader("g3", "o1", "alice", at(2), reader="alice")).reason \
        is ReasonCode.ALREADY_EXISTS
    assert rejected(d.state, RevokeReader("r1", "o1", "alice", at(2), reader="carol")).reason is ReasonCode.NOT_FOUND
    r = decide(d.state, RevokeReader("r", "o1", "alice", at(3), reader="bob"))
    assert isinstance(r.outcome, Event) and r.outcome.type is EventType.READER_REVOKED
    assert r.state is not None and r.state.readers == ()
    limits = Limits(max_readers=1)
    assert rejected(d.state, GrantReader("g4", "o1", "alice", at(2), reader="carol"), limits).reason \
        is ReasonCode.TOO_LARGE


def test_idempotency_keys_belong_to_their_principal() -> None:
    s = decide(created(), GrantEditor("g0", "o1", "alice", at(0.5), editor="bob")).state
    s = decide(s, UpdateObject("K", "o1", "alice", at(1), patch='{"a": 2}')).state
    # bob, an editor, uses alice's key: his own command, applied as such
    d = decide(s, UpdateObject("K", "o1", "bob", at(2), patch='{"a": 2}'))
    assert d.accepted and d.state is not None and d.state.version == 4
    # alice's retry is still answered with her own outcome, not bob's
    r = rejected(d.state, UpdateObject("K", "o1", "alice", at(3), patch='{"a": 2}'))
    assert (r.reason, r.original_version) == (ReasonCode.DUPLICATE, 3)
    r = rejected(d.state, UpdateObject("K", "o1", "bob", at(3), patch='{"a": 2}'))
    assert (r.reason, r.original_version) == (ReasonCode.DUPLICATE, 4)
    # mallory (no rights) with alice's key learns nothing: NOT_FOUND, as for an unknown id
    assert rejected(d.state, UpdateObject("K", "o1", "mallory", at(3), patch='{"a": 2}')).reason \
        is ReasonCode.NOT_FOUND
    # a create by someone else with the creator's key is not a duplicate of it
    assert rejected(d.state, CreateObject("c-create", "o1", "bob", at(3), document='{"a": 1}')).reason \
        is ReasonCode.ALREADY_EXISTS


def test_dedup_runs_after_authorization() -> None:
    s = decide(created(), GrantEditor("g0", "o1", "alice", at(0.5), editor="bob")).state
    s = decide(s, UpdateObject("K", "o1", "bob", at(1), patch='{"a": 2}')).state
    s = decide(s, RevokeEditor("r0", "o1", "alice", at(2), editor="bob")).state
    s = decide(s, GrantReader("g1", "o1", "alice", at(2.5), reader="bob")).state
    assert rejected(s, UpdateObject("K", "o1", "bob", at(3), patch='{"a": 2}')).reason is ReasonCode.FORBIDDEN


@pytest.mark.parametrize("other", [
    UpdateObject("K", "o1", "alice", at(3), patch='{"a": 3}'),
    UpdateObject("K", "o1", "alice", at(3), expected_version=2, patch='{"a": 2}'),
    DeleteObject("K", "o1", "alice", at(3)),
    GrantEditor("K", "o1", "alice", at(3), editor="bob"),
])
def test_a_key_reused_for_a_different_request_is_refused(other: object) -> None:
    s = decide(created(), UpdateObject("K", "o1", "alice", at(1), patch='{"a": 2}')).state
    assert rejected(s, other).reason is ReasonCode.IDEMPOTENCY_KEY_REUSED
    assert rejected(s, UpdateObject("K", "o1", "alice", at(2), patch='{"a": 2}')).reason is ReasonCode.DUPLICATE


def test_state_written_by_schema_v1_still_reads_and_dedups() -> None:
    s = decide(created(), UpdateObject("u", "o1", "alice", at(1), patch='{"a": 2}')).state
    assert s is not None
    v1 = SchemaCatalog.repository().by_id(1301)
    assert v1 is not None
    body = io.BytesIO()
    record = {k: v for k, v in records.state_to_record(s).items()
              if k not in ("readers", "recent_principals", "recent_fingerprints")}
    fastavro.schemaless_writer(body, v1.parsed, record)
    old = codec.decode_state(header(1301) + body.getvalue())
    assert [(r.command_id, r.principal, r.fingerprint) for r in old.recent] == [("c-create", None, None),
                                                                               ("u", None, None)]
    assert old.readers == () and old.version == 2
    assert rejected(old, UpdateObject("u", "o1", "alice", at(2), patch='{"a": 9}')).reason is ReasonCode.DUPLICATE
    new = decide(old, UpdateObject("u2", "o1", "alice", at(3), patch="{}")).state
    assert new is not None and codec.decode_state(codec.encode_state(new)) == new


@pytest.mark.parametrize("field", ["command_id", "object_id", "principal"])
def test_ids_over_the_bound_are_malformed(field: str) -> None:
    cmd = UpdateObject("u", "o1", "alice", at(1), patch="{}")
    cmd = replace(cmd, **{field: "é" * 129})  # 258 UTF-8 bytes
    assert rejected(created(), cmd).reason is ReasonCode.MALFORMED
    assert decide(created(), replace(UpdateObject("u", "o1", "alice", at(1), patch="{}"),
                                     command_id="é" * 128)).accepted


def test_editor_may_update() -> None:
    s = decide(created(), GrantEditor("g0", "o1", "alice", at(0.5), editor="bob")).state
    assert decide(s, UpdateObject("u", "o1", "bob", at(1), patch="{}")).accepted


def test_duplicate_names_the_original_outcome_and_version() -> None:
    s = decide(created(), UpdateObject("u", "o1", "alice", at(1), patch='{"a": 2}')).state
    s = decide(s, UpdateObject("u2", "o1", "alice", at(2), patch='{"a": 3}')).state
    r = rejected(s, UpdateObject("u", "o1", "alice", at(3), patch='{"a": 2}'))
    assert r.reason is ReasonCode.DUPLICATE
    assert (r.original_outcome, r.original_version, r.current_version) == ("ACCEPTED", 2, 3)


def test_duplicate_is_checked_before_existence() -> None:
    s = decide(created(), DeleteObject("d", "o1", "alice", at(1))).state
    assert rejected(s, DeleteObject("d", "o1", "alice", at(2))).reason is ReasonCode.DUPLICATE
    assert rejected(s, CreateObject("c-create", "o1", "alice", at(2), document='{"a": 1}')).reason \
        is ReasonCode.DUPLICATE
    # another principal's same key is not a duplicate; to an outsider the deleted id is taken (issue 25)
    assert rejected(s, CreateObject("c-create", "o1", "x", at(2), document='{"a": 1}')).reason \
        is ReasonCode.ALREADY_EXISTS


def test_duplicate_expires_after_ttl_in_event_time() -> None:
    limits = Limits(dedup_ttl=timedelta(minutes=5))
    s = decide(created(), UpdateObject("u", "o1", "alice", at(1), patch="{}"), limits).state
    assert rejected(s, UpdateObject("u", "o1", "alice", at(301), patch="{}"), limits).reason is ReasonCode.DUPLICATE
    late = decide(s, UpdateObject("u", "o1", "alice", at(302), patch="{}"), limits)
    assert late.accepted and late.state is not None
    assert [r.command_id for r in late.state.recent] == ["u"]  # c-create and the first u pruned


def test_recent_is_bounded_fifo() -> None:
    limits = Limits(max_recent=3, dedup_ttl=None)
    s = created()
    for i in range(5):
        s = decide(s, UpdateObject(f"u{i}", "o1", "alice", at(i + 1), patch="{}"), limits).state  # type: ignore[assignment]
    assert [r.command_id for r in s.recent] == ["u2", "u3", "u4"]
    assert decide(s, UpdateObject("u0", "o1", "alice", at(9), patch="{}"), limits).accepted


def test_retry_of_rejected_command_is_decided_again() -> None:
    s = created()
    cmd = UpdateObject("u", "o1", "alice", at(1), expected_version=2, patch="{}")
    assert rejected(s, cmd).reason is ReasonCode.VERSION_CONFLICT
    s = decide(s, UpdateObject("other", "o1", "alice", at(2), patch="{}")).state
    assert decide(s, cmd).accepted


def test_too_large_document_and_patch() -> None:
    limits = Limits(max_document_bytes=10)
    assert rejected(None, CreateObject("c", "o1", "a", T0, document='{"k": "ééééé"}'), limits).reason \
        is ReasonCode.TOO_LARGE
    assert rejected(created(), UpdateObject("u", "o1", "alice", at(1), patch='{"k": "0123456789"}'), limits).reason \
        is ReasonCode.TOO_LARGE


def test_too_many_editors() -> None:
    limits = Limits(max_editors=2)
    s = created()
    for name in ("b", "c"):
        s = decide(s, GrantEditor(f"g{name}", "o1", "alice", at(1), editor=name), limits).state  # type: ignore[assignment]
    assert rejected(s, GrantEditor("gd", "o1", "alice", at(2), editor="d"), limits).reason is ReasonCode.TOO_LARGE


def test_grant_existing_editor_or_owner_is_already_exists_revoke_stranger_is_not_found() -> None:
    s = decide(created(), GrantEditor("g", "o1", "alice", at(1), editor="bob")).state
    assert rejected(s, GrantEditor("g2", "o1", "alice", at(2), editor="bob")).reason is ReasonCode.ALREADY_EXISTS
    assert rejected(s, GrantEditor("g3", "o1", "alice", at(2), editor="alice")).reason is ReasonCode.ALREADY_EXISTS
    assert rejected(s, RevokeEditor("r", "o1", "alice", at(2), editor="carol")).reason is ReasonCode.NOT_FOUND


@pytest.mark.parametrize("cmd", [
    CreateObject("c", "o2", "a", T0, document="[1, 2]"),
    CreateObject("c", "o2", "a", T0, document="{not json"),
    CreateObject("", "o2", "a", T0, document="{}"),
    CreateObject("c", "", "a", T0, document="{}"),
])
def test_malformed_create(cmd: object) -> None:
    assert rejected(None, cmd).reason is ReasonCode.MALFORMED


@pytest.mark.parametrize("patch", ["{oops", "42", "null", ""])
def test_malformed_patch(patch: str) -> None:
    assert rejected(created(), UpdateObject("u", "o1", "alice", at(1), patch=patch)).reason is ReasonCode.MALFORMED


def test_malformed_empty_editor() -> None:
    assert rejected(created(), GrantEditor("g", "o1", "alice", at(1), editor="")).reason is ReasonCode.MALFORMED


def test_naive_timestamp_refused_and_other_zones_normalised() -> None:
    with pytest.raises(ArbiterError) as err:
        DeleteObject("d", "o1", "a", datetime(2025, 1, 1))  # noqa: DTZ001
    assert err.value.code == ReasonCode.MALFORMED
    cet = DeleteObject("d", "o1", "a", datetime(2025, 1, 1, 13, tzinfo=timezone(timedelta(hours=1))))
    assert cet.issued_at == datetime(2025, 1, 1, 12, tzinfo=UTC) and cet.issued_at.tzinfo is UTC


def test_size_is_utf8_bytes() -> None:
    assert CreateObject("c", "o", "a", T0, document='{"é": 1}').size == 9
    assert UpdateObject("c", "o", "a", T0, patch="{}").size == 2
    assert DeleteObject("c", "o", "a", T0).size == 0


@pytest.mark.parametrize("reason", [ReasonCode.MALFORMED, ReasonCode.UNSUPPORTED_SCHEMA, ReasonCode.MISROUTED])
def test_reject_record_keeps_bytes_and_coordinates_with_deterministic_id(reason: ReasonCode) -> None:
    original = OriginalRecord("commands", 3, 42, b"k", b"\x01garbage")
    r1 = reject_record(original, reason, "bad", object_id="o1")
    r2 = reject_record(original, reason, "bad again", object_id="o1")
    assert r1.rejection_id == r2.rejection_id and r1.original == original and r1.reason is reason
    assert r1.rejection_id != reject_record(replace(original, offset=43), reason, "bad").rejection_id


def test_rejection_ids_are_deterministic() -> None:
    cmd = UpdateObject("u", "o1", "alice", at(1), expected_version=7, patch="{}")
    assert decide(created(), cmd) == decide(created(), cmd)


@pytest.mark.parametrize("payload", ['{"a": "\\ud800"}', '{"a": {"b": "x\\udfff"}}', '{"\\udc00": 1}'])
def test_lone_surrogate_is_malformed(payload: str) -> None:
    # It parses as JSON but can never be encoded as UTF-8: accepting it would poison every consumer downstream.
    assert rejected(None, CreateObject("c1", "o1", "alice", T0, document=payload)).reason is ReasonCode.MALFORMED
    assert rejected(created(), UpdateObject("c2", "o1", "alice", T0, patch=payload)).reason is ReasonCode.MALFORMED


def test_escaped_valid_unicode_is_accepted() -> None:
    assert decide(None, CreateObject("c1", "o1", "alice", T0, document='{"a": "\\u00e9\\ud83d\\ude00"}')).accepted


@pytest.mark.parametrize("text", [
    '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1e400}', '{"a": -1e400}',
    '{"a": "\\ud800"}', '{"a":' + "[" * 32 + "]" * 32 + "}", '{"a": 1} x', "{'a': 1}",
])
def test_only_rfc8259_objects_within_the_depth_limit_are_stored(text: str) -> None:
    assert rejected(None, CreateObject("c", "o1", "alice", T0, document=text)).reason is ReasonCode.MALFORMED
    assert rejected(created(), UpdateObject("u", "o1", "alice", at(1), patch=text)).reason is ReasonCode.MALFORMED


def test_nesting_at_the_depth_limit_and_large_finite_numbers_are_accepted() -> None:
    deep = '{"a":' + "[" * 30 + "{}" + "]" * 30 + "}"  # 32 levels: the limit
    assert decide(None, CreateObject("c", "o1", "alice", T0, document=deep)).accepted
    assert decide(None, CreateObject("c", "o1", "alice", T0, document='{"a": 1e308, "b": "[[[[{{{{"}')).accepted


def test_a_group_grantee_lets_the_groups_members_read_and_edit_from_the_command_alone() -> None:
    """group:<name> as editor or reader holds for any command whose groups name it; decided from the command."""
    s = created()
    s = decide(s, GrantEditor("g1", "o1", "alice", at(0.1), editor="group:eng")).state
    s = decide(s, GrantReader("g2", "o1", "alice", at(0.2), reader="group:ops")).state
    assert s is not None
    patch = '{"b": 2}'
    engineer = UpdateObject("u1", "o1", "dave", at(1), patch=patch, groups=("eng", "misc"))
    d = decide(s, engineer)
    assert d.accepted and d.state is not None and d.state.version == s.version + 1
    assert decide(s, engineer) == d  # deterministic: the same command, the same decision
    operator = UpdateObject("u2", "o1", "erin", at(1), patch=patch, groups=("ops",))
    assert rejected(s, operator).reason is ReasonCode.FORBIDDEN  # readers see it, may not edit it
    outsider = UpdateObject("u3", "o1", "dave", at(1), patch=patch)  # the same principal without the group
    assert rejected(s, outsider).reason is ReasonCode.NOT_FOUND
    assert rejected(s, UpdateObject("u4", "o1", "dave", at(1), patch=patch, groups=("group:eng",))).reason \
        is ReasonCode.NOT_FOUND  # a group's name, not a grantee string
    for admin in (DeleteObject("d1", "o1", "dave", at(1), groups=("eng",)),
                  GrantReader("g3", "o1", "dave", at(1), reader="x", groups=("eng",))):
        assert rejected(s, admin).reason is ReasonCode.FORBIDDEN  # ownership is never a group's


def test_commands_carry_groups_issuer_and_jti_and_older_commands_read_with_none() -> None:
    cmd = UpdateObject("u", "o1", "dave", T0, patch="{}", groups=("eng", "ops"), issuer="https://idp/realms/a",
                       jti="j-1")
    assert codec.decode_command(codec.encode_command(cmd)) == cmd
    v2 = SchemaCatalog.repository().by_id(1002)
    assert v2 is not None
    buf = io.BytesIO()
    buf.write(header(1002))
    plain = {k: v for k, v in records.command_to_record(cmd).items() if k not in ("groups", "issuer", "jti")}
    fastavro.schemaless_writer(buf, v2.parsed, plain)  # what an API before issue 27 wrote
    assert codec.decode_command(buf.getvalue()) == replace(cmd, groups=(), issuer=None, jti=None)
