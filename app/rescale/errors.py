"""The named refusals of ``arbiter rescale``: each says which step could not go on and what to do."""

from __future__ import annotations

from app.errors import ArbiterError


class RescaleError(ArbiterError):
    """A rescale cannot go on; the code names why."""

    code = "RESCALE"


class NotDrained(RescaleError):
    """The validator has not decided (and committed) every command of the old generation yet."""

    code = "RESCALE_NOT_DRAINED"


class HoldsInFlight(RescaleError):
    """A shard holds objects waiting for a decision that spans objects (app.validator.multi): not drained yet."""

    code = "RESCALE_HOLDS_IN_FLIGHT"


class RulesDiverged(RescaleError):
    """The old shards are on different rules versions (a deploy is half way), so no single version fits a new shard."""

    code = "RESCALE_RULES_DIVERGED"


class UnknownShardKey(RescaleError):
    """An old shard holds a key the split does not know how to route; nothing is written rather than lose it."""

    code = "RESCALE_UNKNOWN_KEY"


class InProgress(RescaleError):
    """Another rescale (to another partition count) is under way; finish it first."""

    code = "RESCALE_IN_PROGRESS"


class BadRequest(RescaleError):
    """The rescale asked for cannot be done with these settings (backend, partition count)."""

    code = "RESCALE_REFUSED"


class WritesPaused(RescaleError):
    """A rescale is cutting the commands topic over: nothing may be written to it until the switch."""

    code = "WRITES_PAUSED"
