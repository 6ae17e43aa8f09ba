"""A shard's rules: the versions it has seen, the one in force, and what a control record does to them.

Both backends call ``control_step`` for every rules control record (``app.rules.control``), in offset order within
its partition, and decide each command under the version in force at its offset. A control record switches the
shard only if it is genuine (signed in the control records' own domain, ``app.signing.CONTROL_DOMAIN``, whatever
``ARBITER_ALLOW_UNSIGNED_COMMANDS`` says: else ``UNAUTHENTICATED``), well formed, compiles, and its version is exactly
one above the one in force (1 on a shard without rules); anything else changes nothing and is said in a rejection.
A deploy's claim on the catalog is signed in another domain, so a copy of a losing claim is no control record, and
a version that skips one is refused: each shard takes the catalog's versions one by one, in order. All of it is a
function of the record and the shard's prior rules, so a replay, a restore or the oracle reach the same result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from app.limits import MESSAGE_CHARS
from app.rules.control import CONTROL_KEY, ControlInvalid, Deploy, decode_control
from app.settings import Settings
from app.signing import CONTROL_DOMAIN, RecordSigner, control_checker_for
from commands import Command, Event, ObjectState, ReasonCode, Rejection, keep_original, reject_record
from commands.ids import command_rejection_id
from commands.rejection import clip
from commands.rules import RuleSet, RulesInvalid, compile_rules, rules_digest


@dataclass(frozen=True, slots=True)
class ShardRules:
    """The rules versions one shard has seen (version -> canonical document) and the version in force (None: no rules)."""

    documents: Mapping[int, str] = field(default_factory=dict)
    active: int | None = None

    def ruleset(self, version: int | None) -> RuleSet | None:
        """Return the compiled rules of ``version`` (None for None); raise ``KeyError`` if the shard has not seen it."""
        if version is None:
            return None
        return compiled(version, self.documents[version])


NO_RULES = ShardRules()


def unknown_version(command: Command, version: int, state: ObjectState | None) -> Rejection:
    """Return the ``RULES_VERSION_UNKNOWN`` rejection of a command to decide under a version the shard lacks."""
    current = state.version if state is not None else 0  # names the rejection only: an outsider learns nothing
    return Rejection(
        rejection_id=command_rejection_id(command.command_id, command.object_id, current,
                                          ReasonCode.RULES_VERSION_UNKNOWN.value, command.principal),
        reason=ReasonCode.RULES_VERSION_UNKNOWN,
        message=clip(f"rules version {version} is not among the versions this shard has seen; the command changes "
                     "nothing", MESSAGE_CHARS),
        command_id=command.command_id, object_id=command.object_id, principal=command.principal,
        occurred_at=command.issued_at)


@lru_cache(maxsize=32)
def compiled(version: int, document: str) -> RuleSet:
    """Return ``compile_rules(document, version=version)``, compiled once per process."""
    return compile_rules(document, version=version)


@dataclass(frozen=True, slots=True)
class ControlResult:
    """What a control record did: its outcome (None when nothing is written for it) and the shard's rules after it."""

    outcome: Event | Rejection | None
    rules: ShardRules
    deploy: Deploy | None  # the version it switched to, None when it changed nothing


def rules_checker(settings: Settings) -> RecordSigner:
    """Return what checks the signature of control records (never None: an unsigned one is never accepted)."""
    return control_checker_for(settings, CONTROL_DOMAIN)


def control_step(rules: ShardRules, key: bytes | None, value: bytes | None, signature: bytes | None, topic: str,
                 partition: int, offset: int, checker: RecordSigner | None, keep: int) -> ControlResult:
    """Apply one rules control record to a shard's ``rules``; ``checker`` is ``rules_checker``'s (None refuses
    every record: there is no unsigned window for control records)."""
    def refuse(reason: ReasonCode, why: str) -> ControlResult:
        original = keep_original(topic, partition, offset, key, value, keep)
        message = clip(f"{topic}[{partition}]@{offset}: rules control record refused, nothing changed: {why}",
                       MESSAGE_CHARS)
        return ControlResult(reject_record(original, reason, message), rules, None)

    if checker is None or checker.domain != CONTROL_DOMAIN:
        return refuse(ReasonCode.UNAUTHENTICATED, "control records are only accepted signed as control records")
    problem = checker.problem(key, value or b"", signature)
    if problem is not None:
        return refuse(ReasonCode.UNAUTHENTICATED, problem)
    if key != CONTROL_KEY:
        return refuse(ReasonCode.MALFORMED, f"its key must be {CONTROL_KEY.decode()!r}")
    try:
        deploy = decode_control(value)
        if rules_digest(deploy.document) != deploy.digest:
            raise ControlInvalid(f"digest {deploy.digest} is not the document's {rules_digest(deploy.document)}")
        compiled(deploy.version, deploy.document)
    except ControlInvalid as e:
        return refuse(ReasonCode.MALFORMED, str(e))
    except RulesInvalid as e:
        return refuse(ReasonCode.MALFORMED, f"rules version {deploy.version} does not compile: "
                      + "; ".join(e.problems or (str(e),)))
    if rules.active is not None and deploy.version <= rules.active:
        if rules.documents.get(deploy.version) == deploy.document:
            return ControlResult(None, rules, None)  # a deploy finished again: this shard already has it
        return refuse(ReasonCode.VERSION_CONFLICT, f"version {deploy.version} is not above the version in force, "
                      f"{rules.active}")
    expected = (rules.active or 0) + 1
    if deploy.version != expected:
        return refuse(ReasonCode.VERSION_CONFLICT, f"version {deploy.version} skips the next version, {expected}: a "
                      "shard takes the catalog's versions one by one")
    documents = {**rules.documents, deploy.version: deploy.document}
    return ControlResult(deployed_outcome(deploy, topic, partition, offset), ShardRules(documents, deploy.version),
                         deploy)


def encode_shard_rules(rules: ShardRules) -> bytes:
    """Return ``rules`` as canonical JSON bytes, for a shard's state (the same bytes for the same rules)."""
    body = {"active": rules.active, "documents": {str(v): d for v, d in sorted(rules.documents.items())}}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_shard_rules(raw: bytes | None) -> ShardRules:
    """Return the rules ``encode_shard_rules`` stored (no rules for None)."""
    if raw is None:
        return NO_RULES
    body = json.loads(bytes(raw))
    return ShardRules({int(v): d for v, d in body["documents"].items()}, body["active"])


def deployed_outcome(deploy: Deploy, topic: str, partition: int, offset: int) -> Event | None:
    """Return the output that records a switch in the audit trail (None until the domain gives it a shape)."""
    return None
