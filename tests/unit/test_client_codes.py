"""The Python client cannot drift from the server: its code table is the server's, its models the OpenAPI's."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.history import EventPage, HistoryEvent, ListedObject
from app.api.models import CommandDecided, CommandQueued
from app.api.problems import STATUS
from arbiter_client import errors, models
from arbiter_client.models import fields_of

pytestmark = pytest.mark.unit


def test_the_client_knows_every_code_the_server_answers_with_and_no_other() -> None:
    server = {str(c) for c in STATUS}
    client = set(errors.CODES) - (errors.PENDING_CODES - server)
    assert client == server, f"missing in the client: {sorted(server - client)}; unknown to the server: " \
                             f"{sorted(client - server)}"


@pytest.mark.parametrize("code", sorted(str(c) for c in STATUS))
def test_each_code_becomes_its_class_and_its_kind_says_whether_to_retry(code: str) -> None:
    e = errors.error_from(STATUS[code], {}, {"code": code, "detail": "d"})
    assert isinstance(e, errors.CODES[code]) and e.code == code and e.status == STATUS[code]
    assert e.retryable == (STATUS[code] in (429, 503)), f"{code} ({STATUS[code]}) retryable={e.retryable}"


def _props(model: Any) -> set[str]:  # noqa: ANN401 - a pydantic model class
    return set(model.model_json_schema()["properties"])


def test_the_client_models_name_the_servers_fields() -> None:
    assert set(fields_of(models.ListedObject)) == _props(ListedObject)
    assert set(fields_of(models.HistoryEvent)) == _props(HistoryEvent)
    assert {"command_id", "object_id", "version", "event"} == set(fields_of(models.Accepted)) - {"position"}
    assert {"command_id", "object_id", "version", "event"} <= _props(CommandDecided)
    assert {"command_id", "object_id", "partition", "offset"} == set(fields_of(models.Queued)) - {"location"}
    assert {"command_id", "object_id", "partition", "offset"} <= _props(CommandQueued)
    assert {"events", "next_after_version"} <= _props(EventPage)
