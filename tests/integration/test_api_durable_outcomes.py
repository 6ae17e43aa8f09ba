"""GET /commands/{id} after an API restart: answered from the audit trail (the real audit projection behind the real
validator), for the command's sender only. The validator is the shared running Arbiter's (the test's objects and
principals carry its tag); the audit trail, under a var directory of the test's, and the API restarted are its own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_api_support import (
    RunningArbiter,
    api_client,
    audit_projection_running,
    auth,
    decided,
    is_problem,
)

pytestmark = pytest.mark.integration

WAIT = {"Prefer": "wait=30"}


def _until_known(client: Any, path: str, headers: dict[str, str], timeout: float = 30.0) -> Any:  # noqa: ANN401
    """GET ``path`` until it is not 404 (the audit projection follows the validator by a batch or two)."""
    deadline = time.monotonic() + timeout
    while (r := client.get(path, headers=headers)).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    return r


def test_an_outcome_decided_before_the_api_started_is_answered_to_its_sender_only(arbiter: RunningArbiter,
                                                                                  tmp_path: Path) -> None:
    settings = arbiter.settings.model_copy(update={"var_dir": tmp_path / "var"})
    name, doc = f"alice-{arbiter.tag}", f"doc-{arbiter.tag}"
    alice, bob = auth(settings, name), auth(settings, f"{name}-not")  # one name a prefix of the other
    with audit_projection_running(settings):
        with api_client(settings) as first:
            decided(first.post("/objects", json={"id": doc, "document": {"n": 1}},
                               headers={**alice, **WAIT, "Idempotency-Key": "made-it"}), 201, '"1"')
            rejected = first.patch(f"/objects/nothing-{arbiter.tag}", json={"n": 2}, headers={
                **alice, **WAIT, "Idempotency-Key": "missed-it", "Content-Type": "application/merge-patch+json"})
            is_problem(rejected, 404, "NOT_FOUND")
        # A new app on the same settings: a fresh outcome cache whose consumer starts at the topics' ends.
        with api_client(settings) as second:
            assert second.app.state.outcomes.lookup(name, "made-it") is None  # type: ignore[attr-defined]
            made = _until_known(second, "/commands/made-it", alice)
            assert made.status_code == 200, made.text
            assert made.headers["etag"] == '"1"'
            assert {k: made.json()[k] for k in ("command_id", "object_id", "status", "version", "event")} == {
                "command_id": "made-it", "object_id": doc, "status": "accepted", "version": 1,
                "event": "CREATED"}
            missed = _until_known(second, "/commands/missed-it", alice)
            assert (missed.status_code, missed.json()["status"], missed.json()["reason"]) == (
                200, "rejected", "NOT_FOUND"), missed.text
            # Another principal: the very 404 of a command id nobody used.
            theirs, nobodys = second.get("/commands/made-it", headers=bob), second.get("/commands/made-ix", headers=bob)
            is_problem(theirs, 404, "NOT_FOUND")
            assert theirs.content == nobodys.content.replace(b"made-ix", b"made-it")
            assert {**theirs.headers, "date": ""} == {**nobodys.headers, "date": ""}
