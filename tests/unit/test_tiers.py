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


def test_the_e2e_checks_listed_in_conftest_are_the_tests_marked_e2e() -> None:
    """CI's e2e step requires every check of ``E2E_CHECKS`` to pass: a test marked e2e but not listed would not be
    required, and one listed but no longer marked would fail the step as missing."""
    from tests.conftest import E2E_CHECKS

    def e2e(node: ast.AST) -> bool:
        return any(isinstance(s, ast.Attribute) and s.attr == "e2e" and isinstance(s.value, ast.Attribute)
                   and s.value.attr == "mark" for s in ast.walk(node))

    marked = set()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        module = any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                       for t in s.targets) and e2e(s.value) for s in tree.body)
        marked |= {f"{path.relative_to(ROOT)}::{f.name}" for f in tree.body
                   if isinstance(f, ast.FunctionDef) and f.name.startswith("test")
                   and (module or any(e2e(d) for d in f.decorator_list))}
    assert marked == set(E2E_CHECKS) and len(E2E_CHECKS) == len(set(E2E_CHECKS))
