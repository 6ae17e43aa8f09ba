"""The newest rules the API has seen (from the catalog, ``app.rules.catalog``), refreshed in the background.

Used by ``GET /rules`` and by the advisory pre-check (``precheck``) of typed creates and of patches (from
``POST /objects``, ``PATCH /objects/{id}`` and ``POST /commands:batch``): a 422 answered early names the rules
version it used in ``Arbiter-Rules-Version``. Advisory only: the validator decides every command under the rules in
force at its offset, which may be newer (a deploy in between) or older (a shard not yet past the control record).

Nothing of it runs on the event loop: a pre-check (JSON parsing, schemas, guards) runs in a small thread pool and
is given up after ``PRECHECK_DEADLINE_S`` (the write goes on, the validator decides; the guards' own cost is bounded
by ``commands.rules.cost``), and a new rules version is compiled in the background (``RulesView.ruleset``). While the
newest version the API knows is compiling, writes are not pre-checked: the previous version is known to be
superseded, and a refusal under it could be one the validator, deciding under the new one, would not make.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from app.rules.catalog import CatalogFold, follow
from app.rules.control import Deploy
from app.settings import Settings
from app.validator.rules import compiled
from app.validator.topic_io import Record
from commands import Command, CreateObject, Event, EventType, ObjectState, ReasonCode, Rejection, UpdateObject, decide
from commands.rules import RuleSet

log = logging.getLogger("arbiter.api.rules")

RULES_VERSION_HEADER = "Arbiter-Rules-Version"
REFRESH_S = 5.0  # how stale the API's view of the newest rules may be (a deploy also refreshes it at once)
REFRESH_WAIT_S = 1.0  # the longest a request waits for a read of the catalog before using the rules it has
#: The longest a write waits for its pre-check (seconds); past it the write goes on unchecked, the validator decides.
PRECHECK_DEADLINE_S = 0.5
#: Threads running pre-checks: a flood of slow ones waits for these (and passes its deadline), never the event loop.
PRECHECK_THREADS = 2
#: Finds the newest known event of an object (the audit trail's, ``AuditOutcomes.latest_event``), None if unknown.
LatestEvent = Callable[[str], Event | None]
T = TypeVar("T")
_PRECHECKS = ThreadPoolExecutor(max_workers=PRECHECK_THREADS, thread_name_prefix="arbiter-precheck")
_COMPILER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arbiter-rules-compile")


async def _off_loop(deadline: float, fn: Callable[..., T], *args: object) -> T | None:
    """Return ``fn(*args)`` run in a pre-check thread, or None when it is not done by ``deadline`` (monotonic)."""
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    try:
        return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(_PRECHECKS, fn, *args), left)
    except TimeoutError:
        log.warning("a pre-check took over %.2f s: the write goes on unchecked (the validator decides)",
                    PRECHECK_DEADLINE_S)
        return None


class RulesView:
    """The newest deployed rules, read from the catalog at most every ``REFRESH_S`` seconds.

    A request never waits longer than ``REFRESH_WAIT_S`` for a read of the catalog: the pre-check is advisory, so
    with the broker slow or down a write goes on with the rules already seen (none, at first) while the read
    finishes in the background, and the write path answers on its own terms (``503 BROKER_UNAVAILABLE`` within
    ``produce_timeout_s``).
    """

    def __init__(self, settings: Settings, latest: LatestEvent | None = None,
                 on_skip: Callable[[Record, str], None] | None = None) -> None:
        self.settings = settings
        self.latest = latest  # set once the audit trail's reader is open: without it, patches are not pre-checked
        # The catalog folded so far: each read takes only what was appended since (junk costs each record once).
        self.catalog = CatalogFold(settings, on_skip)
        self.deploy: Deploy | None = None
        self.read_at = -REFRESH_S
        self._refresh: asyncio.Future[None] | None = None
        self._rules: RuleSet | None = None  # the newest version compiled so far
        self._compiling: tuple[int, Future[RuleSet]] | None = None  # the version being compiled, in _COMPILER

    async def newest(self) -> Deploy | None:
        """Return the newest deployed rules (re-read from the catalog when the last read is older than REFRESH_S)."""
        if time.monotonic() - self.read_at < REFRESH_S:
            return self.deploy
        if self._refresh is None or self._refresh.done() or self._refresh.get_loop() is not asyncio.get_running_loop():
            self._refresh = asyncio.ensure_future(self._read())
        try:
            await asyncio.wait_for(asyncio.shield(self._refresh), REFRESH_WAIT_S)
        except TimeoutError:
            pass  # the read goes on in the background; this request uses what was seen before
        return self.deploy

    async def _read(self) -> None:
        try:
            versions = (await asyncio.to_thread(follow, self.settings, self.catalog)).versions
            found = versions[-1] if versions else None
            if found is not None and (self.deploy is None or found.version >= self.deploy.version):
                self.deploy = found  # never older than a deploy this API made meanwhile (``seen``)
                self._compile(found)  # now, not at the first typed write
        except Exception as e:  # noqa: BLE001 - advisory: a broker hiccup must not fail a write
            log.warning("cannot read the rules catalog %s: %s", self.settings.rules_topic, e)
        self.read_at = time.monotonic()

    def seen(self, deploy: Deploy) -> None:
        """Take a deploy this API made as the newest at once."""
        if self.deploy is None or deploy.version >= self.deploy.version:
            self.deploy, self.read_at = deploy, time.monotonic()
            self._compile(deploy)

    async def ruleset(self) -> RuleSet | None:
        """Return the newest deployed rules compiled, or None: none deployed, or the newest still compiling (begun
        here, in the background: a 0.5 MiB document takes seconds, which the event loop must not wait for)."""
        d = await self.newest()
        if d is None:
            return None
        if self._rules is not None and self._rules.version == d.version:
            return self._rules
        self._compile(d)
        return None

    def _compile(self, d: Deploy) -> None:
        """Compile ``d`` in the background unless it is compiled, under way, or failed already."""
        if self._rules is not None and self._rules.version >= d.version:
            return
        if self._compiling is not None and self._compiling[0] == d.version:
            return  # under way, or failed (logged once: a version that does not compile stays unchecked)
        future = _COMPILER.submit(compiled, d.version, d.document)
        self._compiling = (d.version, future)
        future.add_done_callback(self._compiled)

    def _compiled(self, future: Future[RuleSet]) -> None:
        try:
            rules = future.result()
        except Exception as e:  # noqa: BLE001 - advisory: writes go on unchecked, the validator decides
            log.warning("cannot compile the newest rules for the pre-check: %s", e)
            return
        if self._rules is None or rules.version > self._rules.version:
            self._rules = rules

    async def compiled_newest(self) -> RuleSet | None:
        """Return the newest deployed rules once compiled (waiting for the background compile), or None."""
        await self.ruleset()
        if self._compiling is not None:
            await asyncio.wrap_future(self._compiling[1])
        return await self.ruleset()


async def precheck(view: RulesView | None, command: Command, deadline: float | None = None) -> Rejection | None:
    """Return the rule rejection ``command`` would get under the newest rules, or None (advisory).

    A typed create is decided in full: its object's state is known (none). A patch is checked against its type's
    patch schema only, the one rule that reads nothing but the patch (tracked fields, transitions and guards need
    the validator's state), and only when the object's newest audited event (``RulesView.latest``) says it is
    typed, live and the caller's own: an outsider learns nothing, an editor's patch is left to the validator (its
    grants would need a read of the read model). Only RULE_VIOLATED and RULE_ERROR answer early (for a patch, only
    the patch schema's); anything else is left to the validator. The work runs in a pre-check thread; None when it
    is not done by ``deadline`` (monotonic; default ``PRECHECK_DEADLINE_S`` from now).
    """
    if view is None:
        return None
    if not (isinstance(command, CreateObject) and command.object_type is not None
            or isinstance(command, UpdateObject) and view.latest is not None):
        return None
    rules = await view.ruleset()
    if rules is None:
        return None
    deadline = deadline if deadline is not None else time.monotonic() + PRECHECK_DEADLINE_S
    if isinstance(command, CreateObject):
        return await _off_loop(deadline, _create_verdict, rules, command)
    assert isinstance(command, UpdateObject) and view.latest is not None
    return await _precheck_patch(rules, view.latest, command, deadline)


def _create_verdict(rules: RuleSet, command: CreateObject) -> Rejection | None:
    outcome = decide(None, command, rules=rules).outcome
    if isinstance(outcome, Rejection) and outcome.reason in (ReasonCode.RULE_VIOLATED, ReasonCode.RULE_ERROR):
        return outcome
    return None


def _refusing_types(rules: RuleSet, command: UpdateObject) -> frozenset[str]:
    """Return the types whose patch schema refuses this patch (the same compiled schemas decide checks): when none
    does, as for most patches, there is nothing to say early and the lookup is spared."""
    payload = json.loads(command.patch)
    return frozenset(t.name for t in rules.types.values() if t.patch_schema is not None
                     and not t.patch_schema.is_valid(payload))


async def _precheck_patch(rules: RuleSet, latest: LatestEvent, command: UpdateObject,
                          deadline: float) -> Rejection | None:
    refusing = await _off_loop(deadline, _refusing_types, rules, command)
    if not refusing:
        return None
    event = await asyncio.to_thread(latest, command.object_id)
    if event is None or event.object_type not in refusing or event.type is EventType.DELETED:
        return None
    return await _off_loop(deadline, _patch_verdict, rules, event, command)


def _patch_verdict(rules: RuleSet, event: Event, command: UpdateObject) -> Rejection | None:
    rule = f"{event.object_type}:patch_schema"
    # The live object as far as the audit trail knows, with no grants: decide's own access checks let only its owner
    # through (anyone else gets NOT_FOUND or FORBIDDEN, left to the validator: an outsider learns nothing), and a
    # stale version or an If-Match that no longer holds is some other refusal, left to the validator too. Past those
    # the rules decide, the patch schema first; a later rule's verdict would come from state made up here: not used.
    known = ObjectState(exists=True, deleted=False, version=event.version, owner=event.owner,
                        object_type=event.object_type)
    outcome = decide(known, command, rules=rules).outcome
    if isinstance(outcome, Rejection) and outcome.reason is ReasonCode.RULE_VIOLATED and outcome.rule == rule:
        return outcome
    return None
