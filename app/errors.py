"""Errors of Arbiter's adapters, under the domain's one root ``ArbiterError``."""

from __future__ import annotations

from commands.errors import ArbiterError, ReasonCode

__all__ = ["ArbiterError", "BrokerUnavailable", "ReasonCode", "SetupError"]


class SetupError(ArbiterError):
    """The environment lacks something Arbiter needs (Java, Maven, a jar); the message names it."""

    code = "SETUP"


class BrokerUnavailable(ArbiterError):
    """The Kafka broker could not be reached or did not acknowledge in time."""

    code = "BROKER_UNAVAILABLE"
