"""Which Avro schema has which id: the versions kept in the repository (ids.json), served to registries as they are."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

SCHEMA_DIR = Path(__file__).resolve().parent
IDS_FILE = SCHEMA_DIR / "ids.json"

COMMAND = "arbiter.Command"
EVENT = "arbiter.Event"
REJECTION = "arbiter.Rejection"
STATE = "arbiter.ObjectState"

Schema = dict[str, Any]


def subject_of(schema: Mapping[str, Any]) -> str:
    """Return the subject of a record schema: its full name (the registry's RecordNameStrategy)."""
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def without_timestamps(schema: Any) -> Any:
    """Return ``schema`` without its ``timestamp-micros`` annotations: the same bytes, read as ints of micros."""
    if isinstance(schema, list):
        return [without_timestamps(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    plain = {k: without_timestamps(v) for k, v in schema.items()}
    if plain.get("logicalType") == "timestamp-micros":
        del plain["logicalType"]
    return plain


def parse(schema: Schema) -> Any:
    """Parse ``schema`` with fastavro in its own name space, so two versions of one record can coexist.

    Timestamps are left as ints of microseconds: ``schemas.records`` converts them, several times faster.
    """
    return fastavro.parse_schema(without_timestamps(schema), named_schemas={})


@dataclass(frozen=True)
class SchemaVersion:
    """One version of one subject's schema and the id written in front of data encoded with it."""

    subject: str
    version: int
    schema_id: int
    schema: Schema
    parsed: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parsed", parse(self.schema))

    @property
    def text(self) -> str:
        """Return the schema as canonical-enough JSON text for a registry."""
        return json.dumps(self.schema, separators=(",", ":"), sort_keys=True)


class SchemaCatalog:
    """All known schema versions by id; the newest version of each subject is its writer and reader schema."""

    def __init__(self, versions: Iterable[SchemaVersion]) -> None:
        self._by_id: dict[int, SchemaVersion] = {}
        self._latest: dict[str, SchemaVersion] = {}
        for v in versions:
            self.add(v)

    def add(self, version: SchemaVersion) -> None:
        """Know ``version``; it becomes its subject's newest if its version number is the highest."""
        known = self._by_id.get(version.schema_id)
        if known is not None and known.schema != version.schema:
            raise ValueError(f"schema id {version.schema_id} is already {known.subject} v{known.version}")
        self._by_id[version.schema_id] = version
        latest = self._latest.get(version.subject)
        if latest is None or version.version > latest.version:
            self._latest[version.subject] = version

    def latest(self, subject: str) -> SchemaVersion:
        """Return the newest version of ``subject``."""
        return self._latest[subject]

    def by_id(self, schema_id: int) -> SchemaVersion | None:
        """Return the version with ``schema_id``, or None if unknown."""
        return self._by_id.get(schema_id)

    def versions(self) -> list[SchemaVersion]:
        """Return every version, by subject then version number."""
        return sorted(self._by_id.values(), key=lambda v: (v.subject, v.version))

    @classmethod
    def repository(cls, ids_file: Path = IDS_FILE) -> SchemaCatalog:
        """Load the schemas and stable ids committed in the repository."""
        table = json.loads(ids_file.read_text("utf-8"))
        versions = []
        for subject, by_version in table.items():
            if subject.startswith("_"):
                continue
            for number, entry in by_version.items():
                schema = json.loads((ids_file.parent / entry["file"]).read_text("utf-8"))
                if subject_of(schema) != subject:
                    raise ValueError(f"{entry['file']} holds {subject_of(schema)}, listed as {subject}")
                versions.append(SchemaVersion(subject, int(number), int(entry["id"]), schema))
        return cls(versions)
