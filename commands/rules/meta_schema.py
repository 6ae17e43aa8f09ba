"""The published JSON Schema (Draft 2020-12) of a rules document; ``schemas/rules.schema.json`` is this, generated.

Regenerate the file with ``python -m commands.rules.meta_schema > schemas/rules.schema.json`` (a test holds them equal).
"""

from __future__ import annotations

import json
from typing import Any

from commands.rules.bounds import (
    DEFAULT_MAX_TRACKED_BYTES,
    MAX_EXPRESSION_CHARS,
    MAX_GUARDS,
    MAX_MESSAGE_BYTES,
    MAX_NAME_BYTES,
    MAX_PARAMETERS,
    MAX_POINTER_BYTES,
    MAX_POINTERS,
    MAX_TRACKED_BYTES_BOUND,
    MAX_TRACKED_FIELDS,
    MAX_TRANSITION_STATES,
    MAX_TYPES,
    NAME_PATTERN,
)

#: The command kinds a guard may run on (``kinds``), as CEL sees them in ``command.kind``.
COMMAND_KINDS = ("create", "update", "delete", "grant_editor", "revoke_editor", "grant_reader", "revoke_reader")
#: What a rule does when it would refuse a command (``commands.rules.evaluate``): ``enforce`` refuses it; ``warn``
#: and ``audit`` let it pass and record the would-be refusal in its event (``warn`` also tells the caller).
MODES = ("enforce", "warn", "audit")

_NAME = {"type": "string", "pattern": NAME_PATTERN, "maxLength": MAX_NAME_BYTES}
#: A parameter's name: a CEL identifier (a guard reads it as ``params.<name>``).
_IDENTIFIER = {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": MAX_NAME_BYTES}
_POINTER = {"type": "string", "pattern": "^(/([^~]|~[01])*)+$", "maxLength": MAX_POINTER_BYTES,
            "description": "An RFC 6901 JSON pointer into the object's document, not the root (\"\")."}
_MESSAGE = {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_BYTES // 4,
            "description": "Shown to the client in the rejection (rule_message) and the HTTP problem."}
#: The most test cases a rules document may hold, and the most ``given`` steps of one case.
MAX_CASES = 256
MAX_CASE_STEPS = 32
_STEP = {
    "type": "object",
    "required": ["kind"],
    "additionalProperties": False,
    "description": "A command as the API takes it (commands.rules.cases).",
    "properties": {
        "kind": {"enum": list(COMMAND_KINDS)},
        "by": {"type": "string", "minLength": 1, "maxLength": 256, "description": "Its principal (default alice)."},
        "groups": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 64}, "maxItems": 32},
        "type": _NAME,
        "document": {"type": "object", "description": "A create's document."},
        "patch": {"type": "object", "description": "An update's JSON merge patch."},
        "principal": {"type": "string", "minLength": 1, "maxLength": 256,
                      "description": "The editor or reader a grant or revoke names."},
        "if_match": {"type": "integer", "minimum": 0, "description": "The expected version (If-Match)."},
    },
}
_CASE = {
    "type": "object",
    "required": ["name", "when", "then"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 256},
        "given": {"type": "array", "items": _STEP, "maxItems": MAX_CASE_STEPS,
                  "description": "Commands decided first, on one object; each must be accepted."},
        "when": _STEP,
        "then": {"oneOf": [{"const": "accepted"},
                           {"type": "object", "required": ["rejected"], "additionalProperties": False,
                            "properties": {"rejected": {"type": "string", "minLength": 1, "maxLength": 160}},
                            "description": "The refusing rule (<type>:<name>, types) or a reason code."},
                           {"type": "object", "required": ["warned"], "additionalProperties": False,
                            "properties": {"warned": {"type": "string", "minLength": 1, "maxLength": 160}},
                            "description": "Accepted, with a warning of this rule (<type>:<name>) in warn or "
                                           "audit mode."}]},
    },
}
_MODE = {"enum": list(MODES),
         "description": "enforce: a failure refuses the command; warn: the command passes, its event and the HTTP "
                        "answer carry the would-be refusal; audit: the same, in the event only."}
_SCHEMA = {"type": ["object", "boolean"],
           "description": "A JSON Schema, Draft 2020-12 (its $schema, if given, must name that draft); no remote $ref."}

META_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://arbiter.invalid/schemas/rules.schema.json",
    "title": "Arbiter rules document",
    "description": "The team's own rules: object types, their JSON Schemas, tracked fields, transitions and guards "
                   "(commands/rules). Deployed with `arbiter rules deploy FILE`.",
    "type": "object",
    "required": ["rules", "types"],
    "additionalProperties": False,
    "properties": {
        "rules": {"const": 1, "description": "The format of this document: 1."},
        "description": {"type": "string", "maxLength": 4096},
        "mode": {**_MODE, "default": "enforce",
                 "description": "The mode of every rule of the document (its schemas, transitions and guards; not "
                                "the built-in types and max_tracked_bytes): a transition or guard may name its own. "
                                + str(_MODE["description"])},
        "max_tracked_bytes": {"type": "integer", "minimum": 2, "maximum": MAX_TRACKED_BYTES_BOUND,
                              "default": DEFAULT_MAX_TRACKED_BYTES,
                              "description": "Default bound on an object's tracked fields (UTF-8 bytes of their "
                                             "canonical JSON); over it a command is TOO_LARGE."},
        "parameters": {"type": "object", "maxProperties": MAX_PARAMETERS, "propertyNames": _IDENTIFIER,
                       "description": "Named values the guards read as params.<name> (commands/rules/params.py): "
                                      "part of the document, its digest and version; a parameter change is a "
                                      "deploy (`arbiter rules params deploy FILE`)."},
        "parameter_schema": {**_SCHEMA, "description": "A JSON Schema (Draft 2020-12) the parameters object must "
                                                       "satisfy: a document or parameter deploy it refuses is not "
                                                       "deployable."},
        "tests": {"type": "array", "items": _CASE, "maxItems": MAX_CASES,
                  "description": "The document's own test cases, given-when-then on one object (`arbiter rules test`); "
                                 "a document whose cases fail is not deployed."},
        "types": {
            "type": "object",
            "maxProperties": MAX_TYPES,
            "propertyNames": _NAME,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "description": {"type": "string", "maxLength": 4096},
                    "create_schema": _SCHEMA,
                    "patch_schema": _SCHEMA,
                    "max_tracked_bytes": {"type": "integer", "minimum": 2, "maximum": MAX_TRACKED_BYTES_BOUND},
                    "tracked": {
                        "type": "object",
                        "maxProperties": MAX_TRACKED_FIELDS,
                        "propertyNames": _NAME,
                        "additionalProperties": _POINTER,
                        "description": "Field name (as CEL sees it in state and next) to JSON pointer.",
                    },
                    "unique": {
                        "type": "array",
                        "items": _NAME,
                        "uniqueItems": True,
                        "maxItems": MAX_TRACKED_FIELDS,
                        "description": "Tracked fields whose non-null values one object of the type holds at a time: "
                                       "a create or patch taking a value another object holds is refused "
                                       "UNIQUE_VIOLATION (docs/concepts/multi-object.md).",
                    },
                    "transitions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["name", "field", "allowed"],
                            "additionalProperties": False,
                            "properties": {
                                "name": _NAME,
                                "field": _NAME,
                                "initial": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                            "uniqueItems": True,
                                            "description": "The values the field may take on create (and when it "
                                                           "is set while null); without it, any key of allowed."},
                                "allowed": {
                                    "type": "object",
                                    "minProperties": 1,
                                    "maxProperties": MAX_TRANSITION_STATES,
                                    "additionalProperties": {"type": "array", "items": {"type": "string"},
                                                             "uniqueItems": True},
                                    "description": "Each value of the field to the values it may move to.",
                                },
                                "message": _MESSAGE,
                                "mode": _MODE,
                            },
                        },
                    },
                    "guards": {
                        "type": "array",
                        "maxItems": MAX_GUARDS,
                        "items": {
                            "type": "object",
                            "required": ["name", "expr", "message"],
                            "additionalProperties": False,
                            "properties": {
                                "name": _NAME,
                                "expr": {"type": "string", "minLength": 1, "maxLength": MAX_EXPRESSION_CHARS,
                                         "description": "A CEL expression over state, next, command and caller; "
                                                        "true lets the command pass."},
                                "message": _MESSAGE,
                                "message_expression": {
                                    "type": "string", "minLength": 1, "maxLength": MAX_EXPRESSION_CHARS,
                                    "description": "A CEL expression over the guard's variables giving the message "
                                                   "of a refusal (like Kubernetes' messageExpression), priced and "
                                                   "bounded as a guard; if it fails, passes the cost budget or gives "
                                                   "an empty string, the static message is used."},
                                "kinds": {"type": "array", "items": {"enum": list(COMMAND_KINDS)}, "minItems": 1,
                                       "uniqueItems": True, "default": ["create", "update"]},
                                "pointers": {"type": "array", "items": _POINTER, "maxItems": MAX_POINTERS},
                                "mode": _MODE,
                            },
                        },
                    },
                },
            },
        },
    },
}


def published_text() -> str:
    """Return the text of ``schemas/rules.schema.json``."""
    return json.dumps(META_SCHEMA, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # pragma: no cover - the generator of the published file
    print(published_text(), end="")
