"""Every test carries a tier marker, so ``./dev test --fast`` (``-m unit``) runs every test that needs no broker,
Spark, PostgreSQL or browser, and nothing falls between the tiers unseen (issue 39)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
TIERS = {"unit", "integration"}


def _tiers(node: ast.expr) -> set[str]:
    """Return the tier markers named in ``node`` (``pytest.mark.unit``, a list of marks, a call of a mark)."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in TIERS and isinstance(sub.value, ast.Attribute) \
                and sub.value.attr == "mark":
            found.add(sub.attr)
    return found


def _untiered(path: Path) -> list[str]:
    """Return the tests of ``path`` that carry no tier marker, neither the module's ``pytestmark`` nor their own."""
    tree = ast.parse(path.read_text("utf-8"))
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets) \
                and _tiers(stmt.value):
            return []
    missing = []

    def visit(body: list[ast.stmt], inherited: set[str], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
                own = set().union(*(_tiers(d) for d in stmt.decorator_list))
                for s in stmt.body:
                    if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                         for t in s.targets):
                        own |= _tiers(s.value)
                visit(stmt.body, inherited | own, f"{stmt.name}.")
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name.startswith("test"):
                if not (inherited | set().union(*(_tiers(d) for d in stmt.decorator_list))):
                    missing.append(prefix + stmt.name)

    visit(tree.body, set(), "")
    return missing


def test_every_test_file_carries_a_tier_marker() -> None:
    files = sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(files) > 50
    untiered = {str(p.relative_to(ROOT)): names for p in files if (names := _untiered(p))}
    assert untiered == {}, "give these a pytestmark = pytest.mark.unit (or integration), or mark each test"


def test_the_check_sees_a_missing_marker(tmp_path: Path) -> None:
    """The check itself: a file without a marker, with one, and a test marked on its own."""
    bare = tmp_path / "test_bare.py"
    bare.write_text("import pytest\n\ndef test_a():\n    pass\n\nclass TestB:\n    def test_c(self):\n        pass\n")
    assert _untiered(bare) == ["test_a", "TestB.test_c"]
    bare.write_text("import pytest\n\n@pytest.mark.integration\ndef test_a():\n    pass\n\ndef helper():\n    pass\n")
    assert _untiered(bare) == []
    bare.write_text("import pytest\n\npytestmark = [pytest.mark.unit, pytest.mark.timeout(5)]\n\ndef test_a():\n"
                    "    pass\n")
    assert _untiered(bare) == []
    bare.write_text("import pytest\n\npytestmark = pytest.mark.timeout(5)\n\ndef test_a():\n    pass\n")
    assert _untiered(bare) == ["test_a"]
