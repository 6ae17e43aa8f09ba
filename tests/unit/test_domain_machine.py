"""A Hypothesis state machine drives random commands over many objects against a tiny reference model."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from commands import (
    Command,
    CreateObject,
    DeleteObject,
    Event,
    GrantEditor,
    GrantReader,
    Limits,
    ObjectState,
    ReasonCode,
    Rejection,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    decide,
)
from schemas import codec

pytestmark = pytest.mark.unit

OBJECTS = ["o1", "o2"]
PRINCIPALS = ["alice", "bob", "carol", "dave"]
DOCUMENTS = {'{"a": 1}': True, '{"b": 2}': True, "{}": True, "[1]": False, "{bad": False, '{"n": NaN}': False}
LIMITS = Limits(max_editors=1, max_recent=4, max_document_bytes=64, dedup_ttl=timedelta(seconds=50), max_readers=2)
T0 = datetime(2025, 1, 1, tzinfo=UTC)
# Weighted so that objects live long enough to be shared, updated and revoked before a delete.
KINDS = ["create", "update", "update", "update", "grant", "grant", "grant", "revoke", "revoke", "read", "read",
         "unread", "delete"]


@dataclass
class Model:
    """What the reference model knows about one object."""

    exists: bool = False
    deleted: bool = False
    version: int = 0
    owner: str = ""
    editors: list[str] = field(default_factory=list)
    readers: list[str] = field(default_factory=list)
    # (principal, command_id, version, issued_at, request): the request is what a retry must repeat.
    accepted: list[tuple[str, str, int, datetime, tuple[object, ...]]] = field(default_factory=list)


def request(cmd: Command) -> tuple[object, ...]:
    """What a command asks for, independent of its id, sender and time: a key reused for another is refused."""
    payload = {f: getattr(cmd, f) for f in cmd.__dataclass_fields__}
    for f in ("command_id", "principal", "issued_at"):
        payload.pop(f)
    return (type(cmd).__name__, tuple(sorted(payload.items())))


def _dedup(m: Model, cmd: Command) -> ReasonCode | None:
    for who, cid, _, at, req in m.accepted:
        if who == cmd.principal and cid == cmd.command_id and cmd.issued_at - at <= LIMITS.dedup_ttl:  # type: ignore[operator]
            return ReasonCode.DUPLICATE if req == request(cmd) else ReasonCode.IDEMPOTENCY_KEY_REUSED
    return None


def expected(m: Model, cmd: Command) -> ReasonCode | None:
    """Return the reason the reference model rejects ``cmd`` for, or None if it accepts it."""
    if isinstance(cmd, CreateObject):
        seen = _dedup(m, cmd) if m.exists or m.deleted else None
        if seen is not None:
            return seen
        if (m.exists or m.deleted) and cmd.principal not in (m.owner, *m.editors, *m.readers):
            return ReasonCode.ALREADY_EXISTS  # hidden: a deleted object looks taken, like a live one
        if m.deleted:
            return ReasonCode.DELETED
        if m.exists:
            return ReasonCode.ALREADY_EXISTS
        if cmd.expected_version not in (None, 0):
            return ReasonCode.VERSION_CONFLICT
        if len(cmd.document) > LIMITS.max_document_bytes:
            return ReasonCode.TOO_LARGE
        return None if DOCUMENTS[cmd.document] else ReasonCode.MALFORMED
    if not m.exists and not m.deleted:
        return ReasonCode.NOT_FOUND
    who = cmd.principal
    if who != m.owner and who not in m.editors and who not in m.readers:
        return ReasonCode.NOT_FOUND  # may not read it: looks exactly like an unknown id
    if who != m.owner and not (isinstance(cmd, UpdateObject) and who in m.editors):
        return ReasonCode.FORBIDDEN
    seen = _dedup(m, cmd)
    if seen is not None:
        return seen
    if m.deleted:
        return ReasonCode.DELETED
    if cmd.expected_version is not None and cmd.expected_version != m.version:
        return ReasonCode.VERSION_CONFLICT
    if isinstance(cmd, UpdateObject) and not DOCUMENTS[cmd.patch]:
        return ReasonCode.MALFORMED
    if isinstance(cmd, GrantEditor):
        if cmd.editor == m.owner or cmd.editor in m.editors:
            return ReasonCode.ALREADY_EXISTS
        if len(m.editors) >= LIMITS.max_editors:
            return ReasonCode.TOO_LARGE
    if isinstance(cmd, RevokeEditor) and cmd.editor not in m.editors:
        return ReasonCode.NOT_FOUND
    if isinstance(cmd, GrantReader):
        if cmd.reader == m.owner or cmd.reader in m.readers:
            return ReasonCode.ALREADY_EXISTS
        if len(m.readers) >= LIMITS.max_readers:
            return ReasonCode.TOO_LARGE
    if isinstance(cmd, RevokeReader) and cmd.reader not in m.readers:
        return ReasonCode.NOT_FOUND
    return None


def apply(m: Model, cmd: Command) -> None:
    """Change the reference model as an accepted ``cmd`` does."""
    if isinstance(cmd, CreateObject):
        m.exists, m.owner = True, cmd.principal
    elif isinstance(cmd, DeleteObject):
        m.deleted = True  # owner, editors and readers are kept: they are told DELETED, others NOT_FOUND
    elif isinstance(cmd, GrantEditor):
        m.editors.append(cmd.editor)
    elif isinstance(cmd, RevokeEditor):
        m.editors.remove(cmd.editor)
    elif isinstance(cmd, GrantReader):
        m.readers.append(cmd.reader)
    elif isinstance(cmd, RevokeReader):
        m.readers.remove(cmd.reader)
    m.version += 1
    fresh = [a for a in m.accepted if cmd.issued_at - a[3] <= LIMITS.dedup_ttl]  # type: ignore[operator]
    m.accepted = [*fresh, (cmd.principal, cmd.command_id, m.version, cmd.issued_at, request(cmd))][-LIMITS.max_recent:]


class ObjectsMachine(RuleBasedStateMachine):
    """Random creates, updates, deletes, shares, retries and stale versions over a few objects."""

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, ObjectState | None] = dict.fromkeys(OBJECTS)
        self.models = {o: Model() for o in OBJECTS}
        self.sent: list[Command] = []
        self.now = T0
        self.counter = 0

    def submit(self, cmd: Command) -> None:
        state, model = self.states[cmd.object_id], self.models[cmd.object_id]
        before = codec.encode_state(state) if state is not None else None
        decision = decide(state, cmd, LIMITS)
        again = decide(state, cmd, LIMITS)
        assert codec.encode_outcome(decision.outcome) == codec.encode_outcome(again.outcome)
        reason = expected(model, cmd)
        if reason is None:
            assert isinstance(decision.outcome, Event), decision.outcome
            assert decision.state is not None and again.state is not None
            assert codec.encode_state(decision.state) == codec.encode_state(again.state)
            assert decision.outcome.version == model.version + 1 == decision.state.version
            apply(model, cmd)
            self.states[cmd.object_id] = decision.state
            assert codec.decode_state(codec.encode_state(decision.state)) == decision.state
        else:
            assert isinstance(decision.outcome, Rejection) and decision.outcome.reason is reason, decision.outcome
            assert decision.state is state
            assert (codec.encode_state(state) if state is not None else None) == before
            assert codec.decode_outcome(codec.encode_outcome(decision.outcome)) == decision.outcome
        self.sent.append(cmd)

    @rule(seconds=st.sampled_from([0, 1, 10, 25, 50]))
    def time_passes(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(kind=st.sampled_from(KINDS), obj=st.sampled_from(OBJECTS),
          who=st.sampled_from(PRINCIPALS), other=st.sampled_from(PRINCIPALS), doc=st.sampled_from([*DOCUMENTS, '{"a": 1}', "{}"]),
          version=st.sampled_from(["none", "current", "stale"]), as_owner=st.booleans())
    def send(self, kind: str, obj: str, who: str, other: str, doc: str, version: str, as_owner: bool) -> None:
        self.counter += 1
        if as_owner and self.models[obj].owner:
            who = self.models[obj].owner
        current = self.models[obj].version
        expected_version = {"none": None, "current": current, "stale": max(0, current - 1)}[version]
        if kind == "create" and version == "current":
            expected_version = 0
        args = (f"cmd-{self.counter}", obj, who, self.now, expected_version)
        cmd: Command = {
            "create": lambda: CreateObject(*args, document=doc),
            "update": lambda: UpdateObject(*args, patch=doc),
            "delete": lambda: DeleteObject(*args),
            "grant": lambda: GrantEditor(*args, editor=other),
            "revoke": lambda: RevokeEditor(*args, editor=other),
            "read": lambda: GrantReader(*args, reader=other),
            "unread": lambda: RevokeReader(*args, reader=other),
        }[kind]()
        self.submit(cmd)

    @rule(obj=st.sampled_from(OBJECTS), editor=st.sampled_from(PRINCIPALS), grant=st.booleans())
    def share(self, obj: str, editor: str, grant: bool) -> None:
        model = self.models[obj]
        if model.exists:
            self.counter += 1
            kind = GrantEditor if grant else RevokeEditor
            self.submit(kind(f"cmd-{self.counter}", obj, model.owner, self.now, model.version, editor=editor))

    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        if self.sent:
            cmd = data.draw(st.sampled_from(self.sent))
            # A client retry carries the same command_id; the API stamps it with a new issued_at.
            self.submit(type(cmd)(**{**{f: getattr(cmd, f) for f in cmd.__dataclass_fields__}, "issued_at": self.now}))

    @rule(data=st.data(), who=st.sampled_from(PRINCIPALS), patch=st.sampled_from(['{"a": 1}', '{"b": 2}']))
    def reuse_key(self, data: st.DataObject, who: str, patch: str) -> None:
        # Another principal's key (a separate command of its own), or the same principal's key on another request.
        if self.sent:
            cmd = data.draw(st.sampled_from(self.sent))
            self.submit(UpdateObject(cmd.command_id, cmd.object_id, who, self.now, None, patch=patch))

    @invariant()
    def states_match_model(self) -> None:
        for obj, state in self.states.items():
            model = self.models[obj]
            if state is None:
                assert model.version == 0
                continue
            assert (state.version, state.deleted, state.owner) == (model.version, model.deleted, model.owner)
            assert list(state.editors) == model.editors
            assert list(state.readers) == model.readers
            assert len(state.recent) <= LIMITS.max_recent


ObjectsMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
TestObjectsMachine = ObjectsMachine.TestCase
