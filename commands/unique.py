"""Unique values across partitions: claims kept as index entries, decided by records between keys (pure).

A type may declare tracked fields unique within it (``Uniques``: type -> (field name, JSON pointer)). A value is
claimed by an *index entry*, a keyed state of the reserved type ``INDEX_TYPE`` whose key (``index_key``) hashes to
its own partition. A create or patch that moves a unique field to a new value is decided in three steps, each a
function of one key's state and one record (docs/concepts/multi-object.md):

1. ``home_step``: the command on its object (the home). ``decide`` as always; an accepted command that takes new
   values *holds* the home (``Hold``) and sends a ``Claim`` per value instead of its event. A held home refuses any
   command ``decide`` would accept ``OBJECT_HELD`` (every other outcome is ``decide``'s own, so a refusal reveals
   nothing ``decide`` would not).
2. ``index_step``: a ``Claim`` on an index entry: free or already the claimer's → the claimer's, ``Answer``
   granted; another's → ``Answer`` taken. A ``Release`` frees the entry if its holder sent it.
3. ``answer_step``: an ``Answer`` on the home: when every claim is answered, all granted → the held command's
   event (and a ``Release`` of each value the object gave up); any taken → ``UNIQUE_VIOLATION`` naming the holder
   only to the holder's owner (and a ``Release`` of each value granted to it). A granted answer no hold waits for
   (a duplicate, after a kill -9 re-emitted a batch) gives the value back unless the home holds or claims it.

Nothing reads a clock, the environment or randomness; the messages' bytes (``encode_message``) are canonical JSON.
Messages between two keys arrive in the order sent (one writer per partition, micro-batches in order), duplicates
right after their original: the steps rely on that and on nothing else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from commands.access import may_read
from commands.command import Command, CreateObject
from commands.decide import Decision, decide
from commands.errors import ArbiterError, ReasonCode
from commands.event import Event, EventType
from commands.ids import RESERVED_PREFIX, command_rejection_id, uuid5
from commands.rejection import Rejection, clip
from commands.rules.ruleset import RuleSet
from commands.rules.tracked import decode_tracked
from commands.state import DEFAULT_LIMITS, Limits, ObjectState

#: The type of an index entry's state: not a name a rules document can declare (``:`` is no name character).
INDEX_TYPE = RESERVED_PREFIX + "unique"
INDEX_PREFIX = INDEX_TYPE + ":"
#: Per type, its unique fields: (tracked field name, JSON pointer), in name order.
Uniques = Mapping[str, tuple[tuple[str, str], ...]]
_VERSION = 1  # of the messages' shape (``v``)


class MessageInvalid(ArbiterError):
    """A record marked as a multi-object protocol record whose value is not a well-formed message."""

    code = "MULTI_MESSAGE_INVALID"


def uniques_of(rules: RuleSet | None) -> Uniques:
    """Return the unique fields each type of ``rules`` declares (``unique:`` in the rules document)."""
    if rules is None:
        return {}
    return {name: t.unique for name, t in rules.types.items() if t.unique}


def index_key(object_type: str, field: str, value: Any) -> str:  # noqa: ANN401 - a JSON value
    """Return the key of the index entry of ``value`` in ``object_type``'s unique ``field`` (fixed length)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    digest = hashlib.sha256(f"{object_type}\x00{field}\x00{text}".encode("utf-8", "surrogatepass")).hexdigest()
    return INDEX_PREFIX + digest


def decision_id(object_id: str, command_id: str, version: int) -> str:
    """Return the id of the decision of ``command_id`` that would bring ``object_id`` to ``version``."""
    return uuid5(f"decision:{object_id}:{command_id}:{version}")


@dataclass(frozen=True, slots=True)
class Claim:
    """Home → index: take the entry for ``home`` (owned by ``holder_owner``) in decision ``decision``."""

    decision: str
    home: str
    holder_owner: str
    index: str
    object_type: str
    field: str


@dataclass(frozen=True, slots=True)
class Answer:
    """Index → home: the claim of ``decision`` is ``granted``, or the entry is ``holder``'s (owned by ``holder_owner``)."""

    decision: str
    home: str
    index: str
    field: str
    granted: bool
    holder: str | None = None
    holder_owner: str | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """Home → index: ``holder`` gives the value back (it never got it, or no longer holds it)."""

    decision: str
    holder: str
    index: str


Message = Claim | Answer | Release


def message_key(message: Message) -> str:
    """Return the key a message is addressed to (its record's key, so its partition)."""
    return message.home if isinstance(message, Answer) else message.index


def encode_message(message: Message) -> bytes:
    """Return the message's record value: canonical JSON (the same bytes for the same message)."""
    if isinstance(message, Claim):
        body: dict[str, Any] = {"kind": "claim", "decision": message.decision, "home": message.home,
                                "holder_owner": message.holder_owner, "index": message.index,
                                "type": message.object_type, "field": message.field}
    elif isinstance(message, Answer):
        body = {"kind": "answer", "decision": message.decision, "home": message.home, "index": message.index,
                "field": message.field, "granted": message.granted, "holder": message.holder,
                "holder_owner": message.holder_owner}
    else:
        body = {"kind": "release", "decision": message.decision, "holder": message.holder, "index": message.index}
    body["v"] = _VERSION
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


_FIELDS = {"claim": ("decision", "field", "holder_owner", "home", "index", "kind", "type", "v"),
           "answer": ("decision", "field", "granted", "holder", "holder_owner", "home", "index", "kind", "v"),
           "release": ("decision", "holder", "index", "kind", "v")}


def decode_message(value: bytes | None) -> Message:
    """Parse a protocol record's value; raise ``MessageInvalid`` naming what is wrong."""
    try:
        body = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError) as e:
        raise MessageInvalid(f"not JSON: {e}") from e
    if not isinstance(body, dict) or body.get("kind") not in _FIELDS:
        raise MessageInvalid("a message is a JSON object whose kind is claim, answer or release")
    if tuple(sorted(body)) != _FIELDS[body["kind"]] or body["v"] != _VERSION:
        raise MessageInvalid(f"a {body['kind']} holds exactly {list(_FIELDS[body['kind']])}, v {_VERSION}")
    strings = [k for k in body if k not in ("kind", "v", "granted", "holder", "holder_owner")]
    if any(not isinstance(body[k], str) or not body[k] for k in strings):
        raise MessageInvalid(f"{', '.join(strings)} must be non-empty strings")
    if not body["index"].startswith(INDEX_PREFIX):
        raise MessageInvalid(f"index must start {INDEX_PREFIX!r}")
    if body["kind"] == "claim":
        return Claim(body["decision"], body["home"], body["holder_owner"], body["index"], body["type"], body["field"])
    if body["kind"] == "release":
        if not isinstance(body["holder"], str):
            raise MessageInvalid("holder must be a string")
        return Release(body["decision"], body["holder"], body["index"])
    if not isinstance(body["granted"], bool) or any(
            body[k] is not None and not isinstance(body[k], str) for k in ("holder", "holder_owner")):
        raise MessageInvalid("granted must be a boolean, holder and holder_owner strings or null")
    return Answer(body["decision"], body["home"], body["index"], body["field"], body["granted"], body["holder"],
                  body["holder_owner"])


@dataclass(frozen=True, slots=True)
class Hold:
    """A home waiting for its claims: the command, the rules version at its offset, what it waits for.

    ``claims`` are (index key, field) of the values it asked for; ``answers`` the answers received, in order.
    """

    decision: str
    command: Command
    rules_version: int | None
    claims: tuple[tuple[str, str], ...]
    answers: tuple[Answer, ...] = ()

    def waiting(self) -> tuple[str, ...]:
        """Return the index keys not answered yet."""
        answered = {a.index for a in self.answers}
        return tuple(i for i, _ in self.claims if i not in answered)


@dataclass(frozen=True, slots=True)
class HomeResult:
    """What a step on a home did: its outcome (None while held), state and hold after it, messages to send."""

    outcome: Event | Rejection | None
    state: ObjectState | None
    hold: Hold | None
    messages: tuple[Message, ...] = ()


@dataclass(frozen=True, slots=True)
class IndexResult:
    """What a step on an index entry did: the entry after it (None: free) and the messages to send."""

    entry: ObjectState | None
    messages: tuple[Message, ...] = ()


def _values(state: ObjectState | None, fields: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    tracked = decode_tracked(state.tracked) if state is not None and state.exists and not state.deleted else {}
    return {name: tracked.get(pointer) for name, pointer in fields}


def _keys(object_type: str, values: Mapping[str, Any]) -> dict[str, str]:
    return {name: index_key(object_type, name, v) for name, v in values.items() if v is not None}


def _held(state: ObjectState | None, command: Command, hold: Hold) -> Rejection:
    version = state.version if state is not None else 0
    return Rejection(
        command_rejection_id(command.command_id, command.object_id, version, ReasonCode.OBJECT_HELD.value,
                             command.principal),
        ReasonCode.OBJECT_HELD,
        f"object {clip(command.object_id)} waits for decision {hold.decision} on values of other objects; retry",
        command.command_id, command.object_id, command.principal, command.issued_at, version,
        issuer=command.issuer, jti=command.jti, rules_version=hold.rules_version)


def home_step(state: ObjectState | None, hold: Hold | None, command: Command, uniques: Uniques,
              limits: Limits = DEFAULT_LIMITS, rules: RuleSet | None = None) -> HomeResult:
    """Decide ``command`` on its object, which ``hold`` holds (None: not held); pure."""
    decision = decide(state, command, limits, rules)
    if hold is not None:
        if decision.accepted:
            return HomeResult(_held(state, command, hold), state, hold)
        return HomeResult(decision.outcome, state, hold)
    new = decision.state
    if not decision.accepted or new is None or new.object_type is None or new.object_type not in uniques:
        return HomeResult(decision.outcome, new, None)
    fields = uniques[new.object_type]
    before, after = _keys(new.object_type, _values(state, fields)), _keys(new.object_type, _values(new, fields))
    event = decision.outcome
    assert isinstance(event, Event)  # noqa: S101 - decision.accepted
    wanted = tuple((index, name) for name, index in sorted(after.items()) if before.get(name) != index)
    if not wanted or event.type is EventType.DELETED:
        gone = sorted(i for n, i in before.items() if after.get(n) != i)
        return HomeResult(event, new, None, tuple(Release(event.event_id, command.object_id, i) for i in gone))
    did = decision_id(command.object_id, command.command_id, new.version)
    claims = tuple(Claim(did, command.object_id, new.owner, index, new.object_type, name) for index, name in wanted)
    return HomeResult(None, state, Hold(did, command, rules.version if rules is not None else None, wanted), claims)


def index_step(entry: ObjectState | None, message: Claim | Release) -> IndexResult:
    """Decide a claim or a release on the index entry ``entry`` (None: the value is free); pure."""
    holder = _holder(entry)
    if isinstance(message, Release):
        if holder is not None and holder[0] == message.holder:
            return IndexResult(None)
        return IndexResult(entry)
    if holder is None:
        taken = ObjectState(True, False, 1, message.holder_owner, object_type=INDEX_TYPE,
                            tracked=json.dumps({"decision": message.decision, "holder": message.home},
                                               sort_keys=True, separators=(",", ":"), ensure_ascii=False))
        return IndexResult(taken, (Answer(message.decision, message.home, message.index, message.field, True),))
    if holder[0] == message.home:
        return IndexResult(entry, (Answer(message.decision, message.home, message.index, message.field, True),))
    assert entry is not None  # noqa: S101 - it has a holder
    return IndexResult(entry, (Answer(message.decision, message.home, message.index, message.field, False,
                                      holder[0], entry.owner),))


def _holder(entry: ObjectState | None) -> tuple[str, str] | None:
    """Return (holder object id, decision) of an index entry, None for a free value."""
    if entry is None or entry.tracked is None:
        return None
    body = json.loads(entry.tracked)
    return str(body["holder"]), str(body["decision"])


def answer_step(state: ObjectState | None, hold: Hold | None, answer: Answer, uniques: Uniques,
                limits: Limits = DEFAULT_LIMITS, rules: RuleSet | None = None) -> HomeResult:
    """Take ``answer`` on its home (``state``, held by ``hold`` or not); ``rules`` are the hold's version's; pure."""
    if hold is None or hold.decision != answer.decision:
        return HomeResult(None, state, hold, _stray(state, hold, answer, uniques))
    if answer.index not in hold.waiting():
        return HomeResult(None, state, hold)  # a duplicate of an answer the hold has
    hold = replace(hold, answers=(*hold.answers, answer))
    if hold.waiting():
        return HomeResult(None, state, hold)
    taken = [a for a in hold.answers if not a.granted]
    command = hold.command
    if not taken:
        decision: Decision = decide(state, command, limits, rules)  # the state is the one held: the same event
        new = decision.state
        gone: list[str] = []
        if decision.accepted and new is not None and new.object_type is not None:
            fields = uniques.get(new.object_type, ())
            before, after = _keys(new.object_type, _values(state, fields)), _keys(new.object_type, _values(new, fields))
            gone = sorted(i for n, i in before.items() if after.get(n) != i)
        return HomeResult(decision.outcome, new, None, tuple(Release(hold.decision, command.object_id, i) for i in gone))
    first = taken[0]
    version = state.version if state is not None else 0
    if may_learn_holder(command.principal, first.holder_owner, command.groups):
        why = f"the value of {first.field} is held by object {clip(first.holder or '')}"
    else:
        why = f"the value of {first.field} is held by another object"
    pointers = dict(uniques.get(_type_of(state, command) or "", ()))
    rejection = Rejection(
        command_rejection_id(command.command_id, command.object_id, version, ReasonCode.UNIQUE_VIOLATION.value,
                             command.principal),
        ReasonCode.UNIQUE_VIOLATION, why, command.command_id, command.object_id, command.principal,
        command.issued_at, version, issuer=command.issuer, jti=command.jti, rules_version=hold.rules_version,
        rule_pointers=tuple(pointers[a.field] for a in taken if a.field in pointers))
    back = tuple(Release(hold.decision, command.object_id, a.index) for a in hold.answers if a.granted)
    return HomeResult(rejection, state, None, back)


def _type_of(state: ObjectState | None, command: Command) -> str | None:
    if isinstance(command, CreateObject):
        return command.object_type
    return state.object_type if state is not None else None


def _stray(state: ObjectState | None, hold: Hold | None, answer: Answer, uniques: Uniques) -> tuple[Message, ...]:
    """Return what a granted answer no hold waits for gives back: a release, unless the home has or claims it."""
    if not answer.granted:
        return ()
    if hold is not None and any(index == answer.index for index, _ in hold.claims):
        return ()
    if state is not None and state.object_type is not None:
        held = _keys(state.object_type, _values(state, uniques.get(state.object_type, ())))
        if answer.index in held.values():
            return ()
    return (Release(answer.decision, answer.home, answer.index),)


def may_learn_holder(principal: str, holder_owner: str | None, groups: tuple[str, ...] = ()) -> bool:
    """Return whether a refused caller is told which object holds the value: only its owner is."""
    return holder_owner is not None and may_read(principal, holder_owner, (), (), groups)

