"""Registry subjects of the catalog's schemas: record-name subjects and TopicNameStrategy's ``<topic>-value``."""

from __future__ import annotations

from app.settings import Settings
from schemas.catalog import COMMAND, EVENT, REJECTION, SchemaCatalog, SchemaVersion
from schemas.codec import default_codec

COMPATIBILITY = "BACKWARD_TRANSITIVE"


def topic_records(settings: Settings) -> dict[str, str]:
    """Return the record (full name) each topic carries, by topic name."""
    return {settings.topic_commands: COMMAND, settings.topic_events: EVENT, settings.topic_rejections: REJECTION}


def subject_versions(settings: Settings, catalog: SchemaCatalog | None = None) -> dict[str, list[SchemaVersion]]:
    """Return every subject with its versions, oldest first: each record's full name, and ``<topic>-value``.

    Both name the same versions with the same ids: a stock deserializer finds the writer schema by id alone,
    a stock serializer (or a compatibility check) by the subject its strategy derives.
    """
    versions = (catalog or default_codec.catalog).versions()
    by_record: dict[str, list[SchemaVersion]] = {}
    for v in versions:
        if v.version > 0:  # 0: a writer learnt from a registry, not one of the repository's versions
            by_record.setdefault(v.subject, []).append(v)
    subjects = dict(by_record)
    for topic, record in topic_records(settings).items():
        subjects[f"{topic}-value"] = by_record[record]
    return subjects
