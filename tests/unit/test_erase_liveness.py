"""``arbiter erase`` takes liveness from the audit trail, not the read model (issue 35, item 4): a live object whose
read model is missing, a mistyped id, an absent or empty read model and one that does not hold the object yet are
all refused with a named code, exit 2, the audit store untouched (the CLI in this process, rocksdict on disk)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.read_models import audit_root, read_model_root
from app.settings import Settings, get_settings
from projections.audit import AuditProjection, verify
from projections.audit.erase import entries_about
from projections.db import DbProjection
from projections.db.store import ReadModelStore
from projections.runner import Item
from tests.unit.erasure_support import erasure_items

pytestmark = pytest.mark.unit


@pytest.fixture
def s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Settings on a fresh ``ARBITER_VAR_DIR`` (also in the environment, for the CLI's ``get_settings``)."""
    monkeypatch.setenv("ARBITER_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.delenv("ARBITER_READ_MODEL", raising=False)
    get_settings.cache_clear()
    yield Settings(var_dir=tmp_path / "var")
    get_settings.cache_clear()


def _audit(s: Settings, items: list[Item]) -> None:
    p = AuditProjection(audit_root(s))
    p.apply([Item(it.record, None, "x") for it in items])
    p.close()


def _project(s: Settings, items: list[Item]) -> None:
    p = DbProjection(ReadModelStore.open_current(read_model_root(s)))
    p.apply(items)
    p.close()


def _erase(capsys: pytest.CaptureFixture[str], object_id: str) -> tuple[int, str]:
    code = main(["erase", object_id])
    out = capsys.readouterr()
    return code, out.out + out.err


def _untouched(s: Settings) -> None:
    report = verify(audit_root(s))
    assert report.ok and not report.erased, report
    assert all(e.value for o in ("gone", "kept") for e in entries_about(audit_root(s), o))


def test_a_live_object_whose_read_model_is_missing_is_refused_and_its_audit_untouched(
        s: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    _audit(s, erasure_items(s.topic_events))  # the DB projection never ran here (or ran against PostgreSQL)
    code, out = _erase(capsys, "kept")
    assert code == 2 and "[ERASE_NOT_DELETED]" in out and "holds no DELETED event of object 'kept'" in out, out
    _untouched(s)


def test_a_mistyped_id_is_refused(s: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    items = erasure_items(s.topic_events)
    _audit(s, items)
    _project(s, items)
    code, out = _erase(capsys, "gon")
    assert code == 2 and "[ERASE_NOT_DELETED]" in out, out
    _untouched(s)


def test_a_deleted_object_is_refused_while_the_read_model_is_absent_empty_or_behind(
        s: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    items = erasure_items(s.topic_events)
    _audit(s, items)
    code, out = _erase(capsys, "gone")  # no read model at all (a PostgreSQL deployment's shell, say)
    assert code == 2 and "[ERASE_READ_MODEL_MISSING]" in out and "does not exist" in out, out
    _project(s, [])  # a read model with no object in it (a rebuild just started)
    code, out = _erase(capsys, "gone")
    assert code == 2 and "[ERASE_READ_MODEL_MISSING]" in out and "holds no object" in out, out
    _project(s, items[4:])  # 'kept' only: the projection has not reached 'gone'
    code, out = _erase(capsys, "gone")
    assert code == 2 and "[ERASE_NOT_PROJECTED]" in out, out
    _untouched(s)
    _project(s, items[:4])  # now it has its deletion: the erasure goes through
    code, out = _erase(capsys, "gone")
    assert code == 0 and "tombstone kept at version 4" in out and "audit: 3 record value(s) erased" in out, out
    assert verify(audit_root(s)).ok
    code, out = _erase(capsys, "gone")  # again: its DELETED event is kept, so it still counts as deleted
    assert code == 0 and "audit: 0 record value(s) erased" in out, out
