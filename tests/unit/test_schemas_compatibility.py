"""Every schema version in ``schemas/`` reads the data of every earlier version of its subject (BACKWARD_TRANSITIVE).

Checked on data, with fastavro's schema resolution: generated records of each older writer schema are read with
each newer reader schema. A changed ``.avsc`` that drops a field's default, changes a type or removes an enum
symbol an older version wrote fails here, before a registry (or a consumer) would refuse it.
"""

from __future__ import annotations

import io
import itertools

import fastavro
import pytest
from fastavro.utils import generate_many

from schemas.catalog import SchemaCatalog, SchemaVersion

pytestmark = pytest.mark.unit

CATALOG = SchemaCatalog.repository()
SUBJECTS = sorted({v.subject for v in CATALOG.versions()})
PAIRS = [(old, new) for subject in SUBJECTS
         for old, new in itertools.combinations([v for v in CATALOG.versions() if v.subject == subject], 2)]


def _shared(read: object, written: object) -> object:
    """Return ``read`` cut down to the fields ``written`` has, in nested records too (new fields take defaults)."""
    if isinstance(read, dict) and isinstance(written, dict):
        return {k: _shared(read[k], v) for k, v in written.items() if k in read}
    return read


def test_every_subject_has_released_versions_to_check() -> None:
    assert SUBJECTS == ["arbiter.Command", "arbiter.Event", "arbiter.ObjectState", "arbiter.Rejection"]
    assert all(sum(v.subject == s for v in CATALOG.versions()) >= 2 for s in SUBJECTS)


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{o.subject}-v{o.version}-by-v{n.version}" for o, n in PAIRS])
def test_a_newer_version_reads_data_written_with_an_older_one(old: SchemaVersion, new: SchemaVersion) -> None:
    for record in generate_many(old.parsed, 200):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, old.parsed, record)
        buf.seek(0)
        read = fastavro.schemaless_reader(buf, old.parsed, new.parsed)  # raises SchemaResolutionError if not
        assert isinstance(read, dict)
        assert buf.tell() == len(buf.getvalue())
        assert _shared(read, record) == record  # every field the old version wrote keeps its value
