"""The newest rules the API has seen (from the catalog, ``app.rules.catalog``), refreshed in the background.

Used by ``GET /rules`` and by the advisory pre-check of creates (``precheck``): a 422 answered early names the rules
version it used in ``Arbiter-Rules-Version``. Advisory only: the validator decides every command under the rules
in force at its offset, which may be newer (a deploy in between) or older (a shard not yet past the control record).
"""

from __future__ import annotations

import asyncio
import logging
import time

from app.rules.catalog import current
from app.rules.control import Deploy
from app.settings import Settings
from app.validator.rules import compiled
from commands import Command, CreateObject, ReasonCode, Rejection, decide
from commands.rules import RuleSet

log = logging.getLogger("arbiter.api.rules")

RULES_VERSION_HEADER = "Arbiter-Rules-Version"
REFRESH_S = 5.0  # how stale the API's view of the newest rules may be (a deploy also refreshes it at once)


class RulesView:
    """The newest deployed rules, read from the catalog at most every ``REFRESH_S`` seconds."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.deploy: Deploy | None = None
        self.read_at = -REFRESH_S
        self._lock = asyncio.Lock()

    async def newest(self) -> Deploy | None:
        """Return the newest deployed rules (re-read from the catalog when the last read is older than REFRESH_S)."""
        if time.monotonic() - self.read_at < REFRESH_S:
            return self.deploy
        async with self._lock:
            if time.monotonic() - self.read_at >= REFRESH_S:
                try:
                    self.deploy = await asyncio.to_thread(current, self.settings)
                except Exception as e:  # noqa: BLE001 - advisory: a broker hiccup must not fail a write
                    log.warning("cannot read the rules catalog %s: %s", self.settings.rules_topic, e)
                self.read_at = time.monotonic()
        return self.deploy

    def seen(self, deploy: Deploy) -> None:
        """Take a deploy this API made as the newest at once."""
        if self.deploy is None or deploy.version >= self.deploy.version:
            self.deploy, self.read_at = deploy, time.monotonic()

    async def ruleset(self) -> RuleSet | None:
        d = await self.newest()
        return None if d is None else compiled(d.version, d.document)


async def precheck(view: RulesView | None, command: Command) -> Rejection | None:
    """Return the rule rejection a create would get under the newest rules, or None (advisory; creates only).

    Only a create is checked: its object's state is known (none), where an update's tracked fields live only in
    the validator. Only RULE_VIOLATED and RULE_ERROR answer early; anything else is left to the validator.
    """
    if view is None or not isinstance(command, CreateObject) or command.object_type is None:
        return None
    rules = await view.ruleset()
    if rules is None:
        return None
    outcome = decide(None, command, rules=rules).outcome
    if isinstance(outcome, Rejection) and outcome.reason in (ReasonCode.RULE_VIOLATED, ReasonCode.RULE_ERROR):
        return outcome
    return None
