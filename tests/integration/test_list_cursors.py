"""Lists answer the same on both read models for what a caller crafts (issue 35, item 7): a cursor the API did not
hand out (to this caller) is ``400 INVALID_CURSOR``, and an ``updated_since`` past the last time either can hold
is an empty page, not a 500. The projection's own store writes, the API (lifespan started) reads through each
backend's reader."""

from __future__ import annotations

import base64
import json

import pytest

from app.read_models import open_writer
from app.settings import Settings
from projections.db import ObjectView
from tests.conftest import READ_MODELS
from tests.integration.test_api_support import api_client, auth, is_problem

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("read_model_settings", READ_MODELS, indirect=True)]


def _position(us: int, oid: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([us, oid], separators=(",", ":")).encode()).decode().rstrip("=")


def test_crafted_cursors_and_times_past_the_last_are_answered_alike_on_both_read_models(
        read_model_settings: Settings) -> None:
    s = read_model_settings
    store = open_writer(s)
    try:
        store.write({f"o{n}": ObjectView({"n": n}, 1, owner="alice", readers=("carol",),
                                         updated_at=f"2026-01-0{n + 1}T00:00:00+00:00") for n in range(3)}, {}, {})
    finally:
        store.close()
    alice, carol = auth(s, "alice"), auth(s, "carol")
    with api_client(s) as client:
        first = client.get("/objects?limit=1", headers=alice).json()
        cursor = first["next_cursor"]
        assert [i["id"] for i in first["items"]] == ["o0"] and cursor
        second = client.get(f"/objects?limit=1&cursor={cursor}", headers=alice).json()
        assert [i["id"] for i in second["items"]] == ["o1"]
        position, _, mac = cursor.rpartition(".")
        far = _position(2**62 - 1, "o1")  # past any datetime: PostgreSQL's reader overflowed on it
        crafted = {
            "another caller's": (cursor, carol),
            "unsigned (as handed out before)": (position, alice),
            "re-pointed": (f"{_position(0, 'o0')}.{mac}", alice),
            "far future, unsigned": (far, alice),
            "far future, old MAC": (f"{far}.{mac}", alice),
            "not base64": ("!!.x", alice),
            "empty MAC": (f"{position}.", alice),
        }
        for what, (c, h) in crafted.items():
            r = client.get(f"/objects?limit=1&cursor={c}", headers=h)
            assert is_problem(r, 400, "INVALID_CURSOR"), what
        # carol's own cursor works for her: a cursor binds a caller, not an object
        mine = client.get("/objects?limit=1", headers=carol).json()["next_cursor"]
        assert [i["id"] for i in client.get(f"/objects?cursor={mine}", headers=carol).json()["items"]] == ["o1", "o2"]
        for since in ("9999-12-31T23:59:59-05:00", "9999-12-31T23:59:59.999999%2B00:00", "9999-12-31T23:59:59"):
            r = client.get(f"/objects?updated_since={since}", headers=alice)
            assert (r.status_code, r.json()) == (200, {"items": [], "next_cursor": None}), (since, r.text)
        r = client.get("/objects?updated_since=2026-01-02T00:00:00%2B00:00", headers=alice)
        assert [i["id"] for i in r.json()["items"]] == ["o1", "o2"]
        r = client.get("/objects?updated_since=0001-01-01T00:00:00%2B01:00", headers=alice)
        assert [i["id"] for i in r.json()["items"]] == ["o0", "o1", "o2"]
