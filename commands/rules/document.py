"""The rules document as text: parse (YAML or JSON), check against its published JSON Schema, canonicalise, digest.

A document is YAML 1.1 (PyYAML's safe loader, so JSON text is read too) whose value must be plain JSON: string
keys only, no timestamps, no NaN or infinities; no anchors or aliases, and lists and maps nested at most
``MAX_DOCUMENT_DEPTH`` deep. Its canonical form is JSON with sorted keys, no spaces and
unescaped Unicode: the text that travels in the control record and whose SHA-256 is the version's digest.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from commands.errors import ArbiterError
from commands.rules.bounds import MAX_DOCUMENT_DEPTH
from commands.rules.meta_schema import META_SCHEMA

#: The most bytes a rules document may have (its canonical JSON must fit a control record).
MAX_DOCUMENT_BYTES = 512 * 1024


class RulesInvalid(ArbiterError):
    """A rules document that cannot be deployed; ``problems`` name each fault with a JSON pointer into it."""

    code = "RULES_INVALID"

    def __init__(self, problems: tuple[str, ...] | list[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("rules document is invalid: " + "; ".join(self.problems), code="RULES_INVALID")


def pointer(*tokens: str | int) -> str:
    """Return the RFC 6901 JSON pointer of ``tokens`` ("" for none)."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def canonical_json(value: Any) -> str:  # noqa: ANN401 - any JSON value
    """Return ``value`` as canonical JSON text: sorted keys, no spaces, Unicode unescaped."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _plain_json_problems(value: Any, at: str = "") -> list[str]:  # noqa: ANN401
    if isinstance(value, dict):
        problems = []
        for k, v in value.items():
            if not isinstance(k, str):
                problems.append(f"{at or '/'}: key {k!r} is not a string (quote it)")
            else:
                problems += _plain_json_problems(v, at + pointer(k))
        return problems
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _plain_json_problems(v, at + pointer(i))]
    if value is None or isinstance(value, str | bool | int):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [f"{at or '/'}: {value} is not a JSON number"]
    return [f"{at or '/'}: a YAML {type(value).__name__} is not JSON (quote it)"]


def _validator() -> Any:  # noqa: ANN401 - a jsonschema_rs validator
    import jsonschema_rs

    return jsonschema_rs.Draft202012Validator(META_SCHEMA, pattern_options=jsonschema_rs.RegexOptions())


_META_VALIDATOR = _validator()


_LOADER: list[Any] = []


def _loader() -> Any:  # noqa: ANN401 - a yaml.SafeLoader subclass, built once (PyYAML is imported when first used)
    """Return PyYAML's safe loader refusing anchors and aliases and nesting deeper than ``MAX_DOCUMENT_DEPTH``.

    Why: an alias is composed once but walked per reference (nine levels of ten in 570 bytes are hours of CPU for
    every walk after), and the composer recurses per level (a 10 KB ``[[[...`` body was a RecursionError). Both
    are refused while composing, before anything walks the value.
    """
    if _LOADER:
        return _LOADER[0]
    import yaml

    class Loader(yaml.SafeLoader):  # type: ignore[misc] # PyYAML has no annotations
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise RulesInvalid([f"(document): line {event.start_mark.line + 1}: YAML anchors and aliases "
                                    "(&name, *name, <<: *name) are not allowed in a rules document: write the "
                                    "value out"])
            collection = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
            if collection:
                self.depth += 1
                if self.depth > MAX_DOCUMENT_DEPTH:
                    raise RulesInvalid([f"(document): line {event.start_mark.line + 1}: lists and maps nested "
                                        f"deeper than {MAX_DOCUMENT_DEPTH}"])
            try:
                return super().compose_node(parent, index)
            finally:
                if collection:
                    self.depth -= 1

    _LOADER.append(Loader)
    return Loader


def parse_rules(document: str | bytes) -> dict[str, Any]:
    """Return the parsed rules document checked against the published JSON Schema; raise RulesInvalid."""
    value, errors = parsed_rules(document)
    if errors:
        raise RulesInvalid([f"{at or '/'}: {message}" for at, message in errors])
    assert isinstance(value, dict)  # the meta-schema says so
    return value


def parsed_rules(document: str | bytes) -> tuple[Any, list[tuple[str, str]]]:  # noqa: ANN401
    """Return the parsed document and every place the published JSON Schema refuses, as (JSON pointer, message) in
    document order; raise RulesInvalid if it is no YAML or JSON text of plain JSON values at all."""
    if isinstance(document, bytes):
        if len(document) > MAX_DOCUMENT_BYTES:
            raise RulesInvalid([f"(document): over {MAX_DOCUMENT_BYTES} bytes"])
        try:
            document = document.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RulesInvalid([f"(document): not UTF-8 text ({e})"]) from e
    if len(document) > MAX_DOCUMENT_BYTES:
        raise RulesInvalid([f"(document): over {MAX_DOCUMENT_BYTES} characters"])
    value = json_value(document, "(document)")
    errors = sorted(_META_VALIDATOR.iter_errors(value), key=lambda e: [str(t) for t in e.instance_path])
    return value, [(pointer(*e.instance_path), _clip(e.message)) for e in errors]


def json_value(text: str | bytes, what: str) -> Any:  # noqa: ANN401 - any JSON value
    """Return YAML or JSON ``text`` read as a plain JSON value (no anchors or aliases, nesting bounded); raise
    RulesInvalid naming ``what`` if it is not one."""
    import yaml

    try:
        value = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader, refusing aliases and depth
    except yaml.YAMLError as e:
        raise RulesInvalid([f"{what}: not YAML or JSON text: {e}"]) from e
    problems = _plain_json_problems(value)
    if problems:
        raise RulesInvalid(problems)
    return value


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def canonical_rules(document: str | bytes) -> str:
    """Return the canonical JSON text of a rules document given as YAML or JSON text; raise RulesInvalid.

    Only the document's form is checked here; ``compile_rules`` also compiles it (CEL, schemas, transitions).
    """
    return canonical_json(parse_rules(document))


def rules_digest(canonical: str) -> str:
    """Return ``"sha256:<hex>"`` of the canonical JSON text of a rules document (its UTF-8 bytes)."""
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
