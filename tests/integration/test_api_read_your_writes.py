"""Read-your-writes behind the real validator and the real DB projection, on both read-model backends: a decided
write's Arbiter-Position, sent back in Arbiter-Min-Position, is waited for, bounded, and leaks nothing.

The validator is the shared running Arbiter's (the test's object and principals carry its tag); the read model, its
DB projection (started late, on purpose) and the API reading it are the test's own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import READ_MODELS, read_model_on
from tests.integration.test_api_support import RunningArbiter, api_client, auth, db_projection_running, decided, is_problem

pytestmark = [pytest.mark.integration, pytest.mark.parametrize("read_model", READ_MODELS)]

WAIT = {"Prefer": "wait=30"}


def test_a_read_with_the_writes_position_sees_the_write(arbiter: RunningArbiter, read_model: str, tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    """Before the projection runs, a read naming the write's position is 503 POSITION_NOT_REACHED (Retry-After)
    after the bounded wait; once it runs, the first read naming it is the new version. A malformed position is
    400; an outsider naming a position gets the unknown id's 404, byte for byte, and the same 503."""
    own = arbiter.settings.model_copy(update={"var_dir": tmp_path / "var", "min_position_wait_s": 0.5})
    doc, dox = f"doc-{arbiter.tag}", f"dox-{arbiter.tag}"  # dox: an id of the same length never made
    with read_model_on(read_model, own, request) as s, api_client(s) as c:
        owner, outsider = auth(s, f"alice-{arbiter.tag}"), auth(s, f"mallory-{arbiter.tag}")
        created = decided(c.post("/objects", json={"id": doc, "document": {"n": 1}}, headers={**owner, **WAIT}),
                          201, '"1"')
        first = created.headers["arbiter-position"]
        assert re.fullmatch(r"events:[0-9]+:[0-9]+", first), first
        patched = decided(c.patch(f"/objects/{doc}", json={"n": 2}, headers={
            **owner, **WAIT, "Content-Type": "application/merge-patch+json"}), 200, '"2"')
        second = patched.headers["arbiter-position"]
        assert second != first and second.rsplit(":", 2)[1] == first.rsplit(":", 2)[1]  # one object, one partition

        # The projection is not running: nothing is projected, so the wait runs out.
        early = c.get(f"/objects/{doc}", headers={**owner, "Arbiter-Min-Position": second})
        is_problem(early, 503, "POSITION_NOT_REACHED")
        assert early.headers["retry-after"] == str(s.retry_after_s)
        hidden = c.get(f"/objects/{doc}", headers={**outsider, "Arbiter-Min-Position": second})
        unknown = c.get(f"/objects/{dox}", headers={**outsider, "Arbiter-Min-Position": second})
        is_problem(hidden, 503, "POSITION_NOT_REACHED")
        assert hidden.content == unknown.content.replace(dox.encode(), doc.encode()) == early.content
        assert {**hidden.headers, "date": ""} == {**unknown.headers, "date": ""}

        for bad in ("events:1", "events:x:1", "rejections:0:1", "events:0:1,", "events:0:-1", "7"):
            is_problem(c.get(f"/objects/{doc}", headers={**owner, "Arbiter-Min-Position": bad}), 400, "BAD_REQUEST")

        # The projection starts cold (assignment, first fetch): a client that waits long enough reads the write.
        with db_projection_running(s), api_client(s.model_copy(update={"min_position_wait_s": 60.0})) as patient:
            got = patient.get(f"/objects/{doc}", headers={**owner, "Arbiter-Min-Position": f"{first}, {second}"})
            assert (got.status_code, got.headers.get("etag"), got.json()) == (200, '"2"', {"n": 2}), got.text
            hidden = patient.get(f"/objects/{doc}", headers={**outsider, "Arbiter-Min-Position": second})
            unknown = patient.get(f"/objects/{dox}", headers={**outsider, "Arbiter-Min-Position": second})
            plain = patient.get(f"/objects/{dox}", headers=outsider)
            is_problem(hidden, 404, "NOT_FOUND")
            assert hidden.content == unknown.content.replace(dox.encode(), doc.encode()) and unknown.content == plain.content
            assert "etag" not in hidden.headers
            partition = second.split(":")[1]
            future = c.get(f"/objects/{doc}", headers={**owner, "Arbiter-Min-Position": f"events:{partition}:999999999"})
            is_problem(future, 503, "POSITION_NOT_REACHED")
            assert future.headers["retry-after"] == str(s.retry_after_s)
            assert c.get(f"/objects/{doc}", headers={**owner, "Arbiter-Min-Position": second}).headers["etag"] == '"2"'
