"""Request and response bodies of the API (pydantic); unknown fields are refused everywhere."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from app.api.callers.auth import PRINCIPAL_PATTERN
from commands.json_text import DEFAULT_MAX_DEPTH, depth_of

#: Compact JSON text of documents and patches; one encoder (json.dumps with options builds one per call).
compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# ASCII only, so the lengths are UTF-8 bytes: within commands.Limits.max_id_bytes (256), which the validator enforces.
OBJECT_ID_PATTERN = r"^[A-Za-z0-9_~:@+\-][A-Za-z0-9._~:@+\-]{0,255}$"  # not "." or "..": URLs would lose them
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,200}$"

ObjectId = Annotated[str, Field(pattern=OBJECT_ID_PATTERN, description="Object id: 1-256 URL-safe characters.")]
Principal = Annotated[str, Field(pattern=PRINCIPAL_PATTERN, description="A principal (user or service) name.")]


def _json_integer(value: Any) -> Any:
    """Accept what JSON Schema calls an integer (``3`` or ``3.0``), refuse booleans and strings."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer")
    return value


def _within_depth(value: dict[str, Any]) -> dict[str, Any]:
    """Hold a document or patch to the validator's nesting limit (the rest of RFC 8259 is checked per body)."""
    if depth_of(value) > DEFAULT_MAX_DEPTH:
        raise ValueError(f"JSON nesting deeper than {DEFAULT_MAX_DEPTH} levels")
    return value


#: A JSON object stored as a document or applied as a merge patch: at most DEFAULT_MAX_DEPTH levels deep.
Document = Annotated[dict[str, Any], AfterValidator(_within_depth)]

# exact in JSON Schema, JavaScript and Avro long
Version = Annotated[int, Field(ge=0, le=2**53 - 1), BeforeValidator(_json_integer)]
IdempotencyKey = Annotated[str, Field(pattern=IDEMPOTENCY_KEY_PATTERN)]


#: A rules type name as the rules document spells it (``commands.rules``).
ObjectType = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z][A-Za-z0-9_.-]*$")]


class _Strict(BaseModel):
    # strict: no coercion (``false`` is not version 0, ``"1"`` is not 1); unknown fields are an error
    model_config = ConfigDict(extra="forbid", strict=True)


class CreateRequest(_Strict):
    """Create an object; ``id`` is the client's choice, else uuid5 of (principal, command id)."""

    id: ObjectId | None = None
    document: Document = Field(description="The object's JSON document.")
    type: ObjectType | None = Field(default=None, description="The object's type in the team's rules (README "
                                    "\"Rules\"); set only on create, never changes. Absent: an untyped object, "
                                    "decided as before rules existed.")


class CommandQueued(_Strict):
    """The command is durably on the commands topic; its outcome will be at ``Location``."""

    command_id: str
    object_id: str
    status: Literal["queued"] = "queued"
    partition: int
    offset: int


class CommandDecided(_Strict):
    """The validator accepted the command (an answer to ``Prefer: wait``)."""

    command_id: str
    object_id: str
    status: Literal["accepted"] = "accepted"
    version: int
    event: str | None = Field(default=None, description="Event type; null when answered from a DUPLICATE.")


class RuleWarningOut(_Strict):
    """A rule in warn mode that would have refused the command (the team's rules, ``commands.rules``)."""

    rule: str = Field(description="<type>:<rule name>")
    reason: str = Field(description="The reason code the refusal would have had: RULE_VIOLATED or RULE_ERROR.")
    message: str
    pointers: list[str]


class CommandOutcome(_Strict):
    """What became of a command, as seen by this API process."""

    command_id: str
    object_id: str | None
    status: Literal["accepted", "rejected"]
    version: int | None = Field(description="Version produced (accepted) or current (rejected).")
    event: str | None = None
    reason: str | None = None
    message: str | None = None
    warnings: list[RuleWarningOut] | None = Field(
        default=None, description="Accepted, but rules in warn mode would have refused it (also in the Warning "
                                  "header); absent when none did.")


# --- batch ---------------------------------------------------------------------------------------

class _BatchBase(_Strict):
    idempotency_key: IdempotencyKey | None = Field(default=None, description="Becomes the command_id.")
    expected_version: Version | None = None


class BatchCreate(_BatchBase):
    kind: Literal["create"]
    object_id: ObjectId | None = None
    document: Document


class BatchUpdate(_BatchBase):
    kind: Literal["update"]
    object_id: ObjectId
    patch: Document


class BatchDelete(_BatchBase):
    kind: Literal["delete"]
    object_id: ObjectId


class BatchGrant(_BatchBase):
    kind: Literal["grant_editor"]
    object_id: ObjectId
    editor: Principal


class BatchRevoke(_BatchBase):
    kind: Literal["revoke_editor"]
    object_id: ObjectId
    editor: Principal


class BatchGrantReader(_BatchBase):
    kind: Literal["grant_reader"]
    object_id: ObjectId
    reader: Principal


class BatchRevokeReader(_BatchBase):
    kind: Literal["revoke_reader"]
    object_id: ObjectId
    reader: Principal


BatchItem = Annotated[BatchCreate | BatchUpdate | BatchDelete | BatchGrant | BatchRevoke | BatchGrantReader
                      | BatchRevokeReader, Field(discriminator="kind")]


class BatchRequest(_Strict):
    commands: list[BatchItem] = Field(min_length=1)


class BatchResult(_Strict):
    command_id: str
    object_id: str
    status: int = Field(description="202 when queued, 413 when too large (not stored), 422 when the rules' "
                        "pre-check refused it (not stored), 503 when the broker did not take it (retry it).")
    partition: int | None = None
    offset: int | None = None
    code: str | None = Field(default=None, description="Why it was not stored: TOO_LARGE, BROKER_UNAVAILABLE, "
                             "WRITES_PAUSED (a rescale is cutting the commands topic over), RULE_VIOLATED or "
                             "RULE_ERROR (the rules' pre-check).")
    error: str | None = None
    rule: str | None = Field(default=None, description="The rule that refused it (RULE_VIOLATED, RULE_ERROR).")
    rule_message: str | None = None
    rules_version: int | None = None


class BatchResponse(_Strict):
    results: list[BatchResult]


class Problem(BaseModel):
    """RFC 9457 problem details; ``code`` is the reason code."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None


class Health(_Strict):
    ok: bool
    broker: bool
    read_model: bool
    outcomes_consumer: bool
    outcomes_consumer_restarts: int = Field(description="Times the outcomes consumer failed and was restarted.")
    outcomes_consumer_error: str | None = Field(description="Its last failure, if any.")
    claims_reader: bool | None = Field(description="The Idempotency-Keys' claims reader has read the claims topic up "
                                       "to where it stood when the process started (keyed writes are 503 until then); "
                                       "null: this process has none.")
    claims_lag: int | None = Field(description="Claim records not folded yet, by the high watermarks its fetches saw "
                                   "(null: not known yet).")
    claims_skipped: int = Field(description="Records on the claims topic that counted for nothing (unsigned, "
                                "forged, malformed).")
    claims_reader_error: str | None = Field(description="The claims reader's last failure, if any.")
