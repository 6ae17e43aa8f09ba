"""Arbiter's domain: commands, compact object state and the one decision function. Pure Python."""

from commands.command import (
    Command,
    CreateObject,
    DeleteObject,
    GrantEditor,
    GrantReader,
    RevokeEditor,
    RevokeReader,
    UpdateObject,
    fingerprint,
)
from commands.decide import Decision, decide
from commands.errors import ArbiterError, ReasonCode
from commands.event import Event, EventType, RuleWarning
from commands.ids import ARBITER_NAMESPACE
from commands.merge_patch import merge_patch
from commands.rejection import KEEP_BYTES, OriginalRecord, Rejection, keep_original, reject_record
from commands.state import ACCEPTED, DEFAULT_LIMITS, Limits, ObjectState, RecentCommand

__all__ = [
    "ACCEPTED",
    "ARBITER_NAMESPACE",
    "DEFAULT_LIMITS",
    "KEEP_BYTES",
    "ArbiterError",
    "Command",
    "CreateObject",
    "Decision",
    "DeleteObject",
    "Event",
    "EventType",
    "GrantEditor",
    "GrantReader",
    "Limits",
    "ObjectState",
    "OriginalRecord",
    "ReasonCode",
    "RecentCommand",
    "Rejection",
    "RevokeEditor",
    "RevokeReader",
    "RuleWarning",
    "UpdateObject",
    "decide",
    "fingerprint",
    "keep_original",
    "merge_patch",
    "reject_record",
]
