"""``app/api`` stays in rooms: few loose modules at its top, and no import circle between its rooms."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

API = Path(__file__).resolve().parents[2] / "app" / "api"
ROOMS = sorted(p.name for p in API.iterdir() if p.is_dir() and (p / "__init__.py").exists())
MAX_LOOSE = 8


def _room_imports(room: str) -> set[str]:
    """Return the other rooms of app.api that modules of ``room`` import (module level or inside functions)."""
    found: set[str] = set()
    for path in (API / room).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[:2] == ["app", "api"] and len(parts) > 2 and parts[2] in ROOMS and parts[2] != room:
                    found.add(parts[2])
    return found


def test_the_top_of_app_api_holds_few_loose_modules() -> None:
    loose = sorted(p.name for p in API.glob("*.py"))
    assert len(loose) <= MAX_LOOSE, loose


def test_every_room_says_what_it_holds() -> None:
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((API / room / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, f"app/api/{room}/__init__.py says nothing about what it holds"


def test_no_import_circle_between_rooms() -> None:
    graph = {room: _room_imports(room) for room in ROOMS}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    circles = [room for room in ROOMS if reaches(room, room, {room})]
    assert not circles, {room: sorted(graph[room]) for room in circles}
