"""Deploy a rules document: check it, claim the next version in the catalog, write a control record to every shard.

Safe under a concurrent double deploy: both claim on the catalog's single partition, the first claim of a version
wins (``app.rules.catalog``), the loser is refused ``RULES_CONFLICT`` before it writes any control record. A deploy
that stopped after its claim (a crash, a broker outage) is finished by deploying the same document again: the
catalog's newest version already has its digest, so its control records are written again, and a shard that has
that version already ignores the repeat. A shard takes only the version after its own (``app.validator.rules``), so
a new version is claimed only once the newest one is placed: a stopped deploy of another document is finished first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from app.errors import ArbiterError
from app.limits import GROUP_NAME_BYTES, ISSUER_BYTES, MAX_GROUPS, size_limits
from app.rules.catalog import CLAIM_KEY, ensure_rules_topic, placed_versions, winners
from app.rules.control import (
    CONTROL_KEY,
    Deploy,
    Placed,
    claim_headers,
    control_headers,
    encode_control,
    encode_placed,
    placed_headers,
)
from app.settings import Settings, get_settings
from app.validator.topic_io import produce_with_headers, read_all
from commands.rules import RuleSet, RulesInvalid, canonical_rules, compile_rules, rules_digest
from commands.rules.cost import InputBounds
from commands.rules.ruleset import document_problems, worst_case_problems


class RulesConflict(ArbiterError):
    """Another deploy claimed the version this one was about to take: nothing was written to the commands topic."""

    code = "RULES_CONFLICT"


@dataclass(frozen=True, slots=True)
class Deployed:
    """What a deploy did: the version, whether it was new, and the offset of the control record on each partition."""

    deploy: Deploy
    new: bool
    offsets: dict[int, int]


def input_bounds(settings: Settings) -> InputBounds:
    """Return the largest inputs this deployment's API lets a command carry (what a guard's worst case assumes)."""
    from app.validator.fold import limits_for

    lim = limits_for(settings)
    return InputBounds(document_bytes=lim.max_document_bytes, id_bytes=lim.max_id_bytes, editors=lim.max_editors,
                       readers=lim.max_readers, groups=MAX_GROUPS, group_bytes=GROUP_NAME_BYTES,
                       issuer_bytes=ISSUER_BYTES)


def check(text: str | bytes, settings: Settings | None = None) -> RuleSet:
    """Return the compiled rules of a document (as version 1: a version does not change what compiles); raise
    ``RulesInvalid`` naming each problem: a guard that could cost more than the budget with the largest inputs the
    API accepts (``commands.rules.cost``), and a failing case of the document's own ``tests`` (``commands.rules.cases``)."""
    from commands.rules.cases import check_cases

    try:
        rules = compile_rules(canonical_rules(text), version=1)
    except RulesInvalid as e:  # every problem in one pass, not the meta-schema's alone
        raise RulesInvalid(document_problems(text) or list(e.problems)) from None
    problems = worst_case_problems(rules, input_bounds(settings if settings is not None else get_settings()))
    if problems:
        raise RulesInvalid(problems)
    check_cases(rules.document, rules)
    return rules


def deploy(settings: Settings, text: str | bytes, *, principal: str, issuer: str | None = None,
           now: datetime | None = None, base: int | None = None) -> Deployed:
    """Check ``text``, claim the next version, and write its control record to every partition of ``commands``.

    With ``base``, ``text`` was made from version ``base`` (a parameter deploy): refused ``RULES_CONFLICT`` unless
    that is still the newest, so a parameter deploy never undoes a document deployed since it read the newest.
    """
    from app.rescale.generation import current_generation_settings

    compiled = check(text, settings)  # refuse before anything is written
    canonical = compiled.document
    if settings.state_backend != "rocksdb" and any(t.unique for t in compiled.types.values()):
        # decisions that span objects run in the rocksdb shards only (app.validator.multi): the spark backend would
        # decide such a document as if it declared no unique field, so it is refused here rather than ignored there
        raise RulesInvalid(["/types: unique fields are enforced by the rocksdb state backend only; this deployment's "
                            f"validator uses ARBITER_STATE_BACKEND={settings.state_backend}, which would not enforce "
                            "them (docs/concepts/multi-object.md)"])
    current_generation_settings(settings)  # and during a rescale's cut-over (WRITES_PAUSED), before the claim
    digest = rules_digest(canonical)
    ensure_rules_topic(settings)
    records = read_all(settings, settings.rules_topic)
    versions = winners(records, settings)
    newest = versions[-1] if versions else None
    at = (now or datetime.now(UTC)).astimezone(UTC)
    if base is not None and (newest.version if newest is not None else 0) != base:
        raise RulesConflict(f"the newest rules version is {newest.version if newest is not None else 'none'}, not "
                            f"{base}, which these parameters were applied to: nothing was written; deploy them again")
    if newest is not None and newest.digest == digest:
        return Deployed(newest, False, _write_controls(settings, newest, principal, at))
    if newest is not None and newest.version not in placed_versions(records, settings):
        _write_controls(settings, newest, principal, at)  # a stopped deploy: shards take versions one by one
    version = (newest.version if newest is not None else 0) + 1
    claim = Deploy(version, digest, canonical, principal, at, issuer)
    value = encode_control(claim)
    bound = size_limits(settings.max_message_bytes).max_record_bytes
    if len(value) + len(CONTROL_KEY) > bound:
        raise RulesInvalid([f"(document): {len(value) + len(CONTROL_KEY)} bytes as a control record, over the {bound} "
                            "a commands record may hold (ARBITER_MAX_MESSAGE_BYTES)"])
    produce_with_headers(settings, [(CLAIM_KEY, value, claim_headers(settings, value), None)], settings.rules_topic)
    won = next((d for d in winners(read_all(settings, settings.rules_topic), settings) if d.version == version), None)
    if won is None or won != claim:
        who = f" by {won.principal} (digest {won.digest})" if won is not None else ""
        raise RulesConflict(f"rules version {version} was claimed{who} by a concurrent deploy; nothing was written to "
                            f"{settings.topic_commands}: check the newest rules and deploy again")
    return Deployed(claim, True, _write_controls(settings, claim, principal, at))


def _write_controls(settings: Settings, claim: Deploy, principal: str, at: datetime) -> dict[int, int]:
    """Write ``claim``'s control record to every partition of the commands topic, then the placement record (by
    ``principal``, at ``at``) to the catalog; return partition -> offset.

    The topic is the current generation's (``app.rescale``); a cut-over begun since the claim refuses it
    (``WRITES_PAUSED``): claimed, it finishes when deployed again after the rescale.
    """
    from app.rescale.generation import current_generation_settings

    settings = current_generation_settings(settings)
    value = encode_control(claim)
    headers = control_headers(settings, value)
    offsets = dict(produce_with_headers(settings, [(CONTROL_KEY, value, headers, p) for p in range(settings.partitions)],
                                        settings.topic_commands))
    placed = encode_placed(Placed(claim.version, claim.digest, principal, at, settings.topic_commands, offsets))
    produce_with_headers(settings, [(CONTROL_KEY, placed, placed_headers(settings, placed), None)], settings.rules_topic)
    return offsets


def parameters_candidate(settings: Settings, text: str | bytes) -> tuple[int, str]:
    """Return the newest deployed version and its document with ``parameters`` replaced by those of the parameters
    file ``text`` (``commands.rules.params``); raise RulesInvalid if no rules are deployed or the file is no
    parameters file. ``arbiter rules what-if --params`` folds this candidate; ``deploy_parameters`` deploys it."""
    from app.rules.catalog import deployed
    from commands.rules.params import parameters_file, with_parameters

    params = parameters_file(text)
    versions = deployed(settings)
    if not versions:
        raise RulesInvalid(["(parameters): no rules are deployed: deploy a rules document that declares its "
                            "parameters first"])
    return versions[-1].version, with_parameters(versions[-1].document, params)


def deploy_parameters(settings: Settings, text: str | bytes, *, principal: str, issuer: str | None = None,
                      now: datetime | None = None) -> Deployed:
    """Deploy a parameters file: the newest document with its ``parameters`` replaced, as the next version (checked,
    claimed, signed and placed as every deploy is; refused ``RULES_CONFLICT`` if another version lands first)."""
    base, candidate = parameters_candidate(settings, text)
    return deploy(settings, candidate, principal=principal, issuer=issuer, now=now, base=base)
