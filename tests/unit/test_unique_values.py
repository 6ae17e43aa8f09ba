"""Unique values across partitions (issue 53, commands.unique): the pure steps and their sequential reference log,
under every interleaving of partitions Hypothesis finds, with duplicated protocol records (a kill -9's re-emit)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands import CreateObject, DeleteObject, Event, EventType, ReasonCode, Rejection, UpdateObject
from commands.rules import RulesInvalid, compile_rules
from commands.unique import (
    INDEX_TYPE,
    Answer,
    Claim,
    Message,
    MessageInvalid,
    Release,
    decode_message,
    encode_message,
    home_step,
    index_key,
    message_key,
    uniques_of,
)
from commands.unique_log import Record, UniqueLog

pytestmark = pytest.mark.unit

RULES = compile_rules(json.dumps({"rules": 1, "types": {"user": {"tracked": {"email": "/email", "nick": "/nick"},
                                                                  "unique": ["nick", "email"]}}}), version=1)
UNIQUES = uniques_of(RULES)
T0 = datetime(2026, 11, 27, 23, 0, tzinfo=UTC)
PARTITIONS = 4


def route(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % PARTITIONS


def create(n: int, email: str | None, *, principal: str | None = None, nick: str | None = None,
           object_id: str | None = None) -> CreateObject:
    doc = {k: v for k, v in (("email", email), ("nick", nick)) if v is not None}
    return CreateObject(f"c{n}", object_id or f"user-{n}", principal or f"client-{n}", T0 + timedelta(seconds=n),
                        document=json.dumps(doc), object_type="user")


class Topic:
    """Partitions of a commands topic fed to a ``UniqueLog`` in an order the caller picks, messages routed back."""

    def __init__(self, log: UniqueLog) -> None:
        self.log = log
        self.parts: list[list[Record]] = [[] for _ in range(PARTITIONS)]
        self.read = [0] * PARTITIONS
        self.outcomes: list[Event | Rejection] = []
        self.sent: list[Message] = []

    def put(self, record: Record) -> None:
        key = message_key(record) if isinstance(record, Claim | Answer | Release) else record.object_id
        self.parts[route(key)].append(record)

    def advance(self, partition: int, duplicate: bool = False) -> bool:
        """Decide the next record of ``partition``; ``duplicate`` writes each message it sends twice."""
        if self.read[partition] >= len(self.parts[partition]):
            return False
        record = self.parts[partition][self.read[partition]]
        self.read[partition] += 1
        outcome, messages = self.log.step(record)
        if outcome is not None:
            self.outcomes.append(outcome)
        for m in messages:
            self.sent.append(m)
            for _ in range(2 if duplicate else 1):
                self.put(m)
        return True

    def drain(self, picks: list[tuple[int, bool]] = ()) -> None:  # type: ignore[assignment]
        for partition, duplicate in picks:
            self.advance(partition, duplicate)
        while any(self.advance(p) for p in range(PARTITIONS)):
            pass


def winners(outcomes: list[Event | Rejection]) -> tuple[list[str], Counter[str]]:
    created = [o.object_id for o in outcomes if isinstance(o, Event) and o.type is EventType.CREATED]
    refused = Counter(o.reason.value for o in outcomes if isinstance(o, Rejection))
    return created, refused


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(range(50)),
       picks=st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.booleans()), max_size=400))
def test_fifty_clients_racing_for_ten_values_make_exactly_ten_winners(order: list[int],
                                                                      picks: list[tuple[int, bool]]) -> None:
    log = UniqueLog(UNIQUES, rules=RULES)
    topic = Topic(log)
    for n in order:
        topic.put(create(n, f"{n % 10}@example.com"))
    topic.drain(picks)
    created, refused = winners(topic.outcomes)
    assert len(created) == 10 and refused == Counter({"UNIQUE_VIOLATION": 40}), (created, refused)
    emails = {json.loads(log.states[o].tracked or "{}")["/email"] for o in created}  # type: ignore[union-attr]
    assert len(emails) == 10
    assert log.holds == {}
    # Each value's index entry names its winner, and nothing else is claimed.
    entries = {k: json.loads(s.tracked or "{}")["holder"] for k, s in log.states.items()
               if s is not None and s.object_type == INDEX_TYPE}
    assert entries == {index_key("user", "email", e): o for o in created for e in
                       [json.loads(log.states[o].tracked or "{}")["/email"]]}  # type: ignore[union-attr]


@settings(max_examples=40, deadline=None)
@given(picks=st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.booleans()), max_size=200))
def test_two_unique_fields_give_back_what_a_refused_command_was_granted(picks: list[tuple[int, bool]]) -> None:
    """Two claims per create, decided apart: a create refused on one value gives the other back (a release)."""
    log = UniqueLog(UNIQUES, rules=RULES)
    topic = Topic(log)
    topic.put(create(1, "a@x", nick="ann"))
    topic.put(create(2, "b@x", nick="ann"))  # shares the nick with 1
    topic.put(create(3, "a@x", nick="bob"))  # shares the email with 1
    topic.drain(picks)
    entries = {k: json.loads(s.tracked or "{}")["holder"] for k, s in log.states.items()
               if s is not None and s.object_type == INDEX_TYPE}
    accepted = [o.object_id for o in topic.outcomes if isinstance(o, Event)]
    # Every entry's holder was accepted and holds that value; every accepted object holds its entries.
    want = {}
    for o in accepted:
        tracked = json.loads(log.states[o].tracked or "{}")  # type: ignore[union-attr]
        want[index_key("user", "email", tracked["/email"])] = o
        want[index_key("user", "nick", tracked["/nick"])] = o
    assert entries == want
    assert log.holds == {} and len(topic.outcomes) == 3
    assert "user-1" in accepted or ("user-2" in accepted and "user-3" in accepted) or len(accepted) >= 1


def test_the_holder_is_named_only_to_its_owner() -> None:
    log = UniqueLog(UNIQUES, rules=RULES)
    topic = Topic(log)
    topic.put(create(1, "a@x", principal="alice"))
    topic.drain()
    topic.put(create(2, "a@x", principal="alice"))  # alice owns the holder: told which object
    topic.put(create(3, "a@x", principal="mallory"))  # may not read it: told only that the value is taken
    topic.drain()
    refused = {o.object_id: o for o in topic.outcomes if isinstance(o, Rejection)}
    assert refused["user-2"].reason is ReasonCode.UNIQUE_VIOLATION and "user-1" in refused["user-2"].message
    assert refused["user-3"].reason is ReasonCode.UNIQUE_VIOLATION and "user-1" not in refused["user-3"].message
    assert refused["user-3"].rule_pointers == ("/email",) and refused["user-3"].current_version == 0


def test_a_held_object_refuses_what_decide_would_accept_and_nothing_else() -> None:
    log = UniqueLog(UNIQUES, rules=RULES)
    first = create(1, "a@x", principal="alice")
    outcome, claims = log.step(first)
    assert outcome is None and len(claims) == 1 and "user-1" in log.holds
    retry, _ = log.step(first)  # the client's retry while held
    assert isinstance(retry, Rejection) and retry.reason is ReasonCode.OBJECT_HELD
    patch, _ = log.step(UpdateObject("u1", "user-1", "mallory", T0, patch="{}"))
    assert isinstance(patch, Rejection) and patch.reason is ReasonCode.NOT_FOUND  # as for an unknown id
    (answer,) = log.step(claims[0])[1]
    done, _ = log.step(answer)
    assert isinstance(done, Event) and done.version == 1 and log.holds == {}
    again, _ = log.step(first)
    assert isinstance(again, Rejection) and again.reason is ReasonCode.DUPLICATE


def test_a_patch_moves_the_claim_and_a_delete_gives_it_back() -> None:
    log = UniqueLog(UNIQUES, rules=RULES)
    topic = Topic(log)
    topic.put(create(1, "a@x", principal="alice"))
    topic.drain()
    topic.put(UpdateObject("u1", "user-1", "alice", T0, patch='{"email":"b@x"}'))
    topic.drain()
    topic.put(create(2, "a@x"))  # a@x was given up by user-1
    topic.put(create(3, "b@x"))  # b@x is user-1's now
    topic.drain()
    kinds = [(o.object_id, o.type.value if isinstance(o, Event) else o.reason.value) for o in topic.outcomes]
    assert kinds == [("user-1", "CREATED"), ("user-1", "UPDATED"), ("user-2", "CREATED"),
                     ("user-3", "UNIQUE_VIOLATION")] or sorted(kinds[2:]) == [("user-2", "CREATED"),
                                                                             ("user-3", "UNIQUE_VIOLATION")]
    topic.put(DeleteObject("d1", "user-1", "alice", T0))
    topic.drain()
    topic.put(create(4, "b@x"))
    topic.drain()
    assert isinstance(topic.outcomes[-1], Event) and topic.outcomes[-1].object_id == "user-4"


def test_a_late_duplicate_grant_gives_back_a_value_the_home_does_not_hold() -> None:
    """A granted answer with no hold (re-emitted after a crash) releases the value unless the home holds it."""
    log = UniqueLog(UNIQUES, rules=RULES)
    topic = Topic(log)
    topic.put(create(1, "a@x"))
    topic.drain()
    key = index_key("user", "email", "a@x")
    stray = Answer("d-old", "user-1", key, "email", True)
    assert log.step(stray) == (None, ())  # user-1 holds a@x: nothing
    other = Answer("d-old", "user-9", index_key("user", "email", "z@x"), "email", True)
    assert log.step(other) == (None, (Release("d-old", "user-9", other.index),))


def test_a_home_with_no_unique_change_is_decided_in_one_step() -> None:
    result = home_step(None, None, CreateObject("c", "o", "p", T0, document="{}"), UNIQUES)
    assert isinstance(result.outcome, Event) and result.messages == () and result.hold is None
    typed = home_step(None, None, create(1, None), UNIQUES, rules=RULES)  # no email: nothing to claim
    assert isinstance(typed.outcome, Event) and typed.messages == ()


@pytest.mark.parametrize("message", [
    Claim("d", "user-1", "alice", index_key("user", "email", "a@x"), "user", "email"),
    Answer("d", "user-1", index_key("user", "email", "a@x"), "email", False, "user-2", "bob"),
    Answer("d", "user-1", index_key("user", "email", "a@x"), "email", True),
    Release("d", "user-1", index_key("user", "email", "a@x")),
])
def test_messages_round_trip_as_canonical_json(message: Message) -> None:
    raw = encode_message(message)
    assert decode_message(raw) == message and encode_message(decode_message(raw)) == raw
    assert json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode() == raw


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"kind":"claim"}', b'{"kind":"steal","v":1}',
                                 b'{"decision":"d","holder":"h","index":"user:x","kind":"release","v":1}'])
def test_a_malformed_message_is_refused(raw: bytes) -> None:
    with pytest.raises(MessageInvalid):
        decode_message(raw)


def test_the_rules_document_declares_unique_tracked_fields() -> None:
    assert UNIQUES == {"user": (("email", "/email"), ("nick", "/nick"))}
    with pytest.raises(RulesInvalid, match=r"/types/user/unique/0: 'mail' is not a tracked field of user"):
        compile_rules(json.dumps({"rules": 1, "types": {"user": {"tracked": {"email": "/email"}, "unique": ["mail"]}}}),
                      version=1)


def test_a_rejection_keeps_its_v4_bytes_unless_its_reason_is_new() -> None:
    """Single-object rejections stay byte-identical (schema id 1204); only the new reasons are written as v5."""
    from schemas import codec
    from schemas.wire import schema_id_of
    old = Rejection("r", ReasonCode.NOT_FOUND, "m", "c", "o", "p", T0, 0)
    new = Rejection("r", ReasonCode.UNIQUE_VIOLATION, "m", "c", "o", "p", T0, 0)
    assert schema_id_of(codec.encode_rejection(old)) == 1204 and schema_id_of(codec.encode_rejection(new)) == 1205
    assert codec.decode_rejection(codec.encode_rejection(new)) == new
    forged = codec.encode_rejection(old)[:5] + codec.encode_rejection(new)[5:]  # v4's id on a reason v4 lacks
    with pytest.raises(codec.DecodeError):
        codec.decode_rejection(forged)


def test_a_deploy_for_the_spark_backend_refuses_unique_fields_it_would_not_enforce() -> None:
    """The spark state backend decides without app.validator.multi: a document declaring unique fields is refused
    before anything is written (no broker is reached: the bootstrap below answers nothing), not silently ignored."""
    from app.rules.deploy import deploy
    from app.settings import Settings

    doc = json.dumps({"rules": 1, "types": {"user": {"tracked": {"email": "/email"}, "unique": ["email"]}}})
    with pytest.raises(RulesInvalid, match="rocksdb state backend only"):
        deploy(Settings(state_backend="spark", kafka_bootstrap="127.0.0.1:9"), doc, principal="ops")
